{#-
    SQL giving the decimal text (`-12.50`) of a Connect Decimal: `unscaled` (SQL, binary) holds the
    unscaled value as two's-complement big-endian bytes, `scale` (SQL, int) the digits after the
    point. Up to 16 bytes (what 38 digits need); null for more, for no bytes, or for a null input.

    The bytes' hex is read as two unsigned 64-bit halves (`conv`), high * 2^64 + low; a negative
    value (first bit set) is read as its complement plus one, with a minus sign.
    `transform(array(x), v -> …)[0]` names an intermediate value once.
-#}
{% macro connect_decimal_text(unscaled, scale) -%}
    transform(array(hex({{ unscaled }})), hex_digits ->
        transform(array(hex_digits >= '8'), negative ->
            transform(array(
                case when negative then translate(hex_digits, '0123456789ABCDEF', 'FEDCBA9876543210')
                else hex_digits end
            ), magnitude ->
                transform(array(cast(try_add(
                    try_add(
                        try_multiply(
                            cast(conv(case when length(magnitude) > 16 then left(magnitude, length(magnitude) - 16)
                                else '0' end, 16, 10) as decimal(38, 0)),
                            18446744073709551616BD
                        ),
                        cast(conv(right(magnitude, 16), 16, 10) as decimal(38, 0))
                    ),
                    case when negative then 1 else 0 end
                ) as string)), digits ->
                    transform(array(lpad(digits, greatest(length(digits), {{ scale }} + 1), '0')), padded ->
                        case when length(magnitude) between 1 and 32 and digits is not null then concat(
                            case when negative then '-' else '' end,
                            case when {{ scale }} > 0
                                then concat(left(padded, length(padded) - {{ scale }}), '.', right(padded, {{ scale }}))
                                else padded
                            end
                        ) end
                    )[0]
                )[0]
            )[0]
        )[0]
    )[0]
{%- endmacro %}
