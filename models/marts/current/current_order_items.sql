{{ config(materialized='view') }}

{{ typed_current_state(
    'order_items',
    [
        ('order_id', 'bigint'),
        ('line_no', 'int'),
        ('sku', 'string'),
        ('qty', 'int'),
    ],
) }}
