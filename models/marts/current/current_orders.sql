{{ config(materialized='view') }}

{{ typed_current_state(
    'orders',
    [
        ('id', 'bigint'),
        ('customer_id', 'bigint'),
        ('status', 'string'),
        ('total', 'decimal(12, 2)'),
        ('placed_at', 'timestamp'),
    ],
) }}
