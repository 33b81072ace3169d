{{ config(materialized='view') }}

{{ typed_current_state(
    'customers',
    [
        ('id', 'bigint'),
        ('email', 'string'),
        ('name', 'string'),
        ('bio', 'string'),
        ('updated_at', 'timestamp'),
    ],
) }}
