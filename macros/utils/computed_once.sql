{#-
    A condition that is always true and not deterministic, for a CTE that several parts of one
    query read. Spark copies a deterministic CTE into every place that reads it (`InlineCTE`): each
    copy scans its Delta table again, pays that scan's file skipping when the query is planned, and
    runs jobs of its own. A CTE that is not deterministic is computed once and every reader reuses
    its shuffle (`ReplaceCTERefWithRepartition`). `rand()` is never below 0: no row is dropped, and
    a retried task gives the same rows. Only for a CTE read more than once: once read, it is inlined
    anyway, and the condition only keeps predicates from being pushed past it.
-#}
{% macro computed_once() -%}
    rand() >= 0
{%- endmacro %}
