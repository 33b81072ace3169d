"""The test harness: what only the tests, the benchmarks and the demo's sample landing zone use.

A throwaway Postgres (``pg_server``), a live workload (``workload``), the oracle that decodes a
slot independently and compares table states (``oracle``), the soak run (``soak``), fault
injection (``faults``), the sample landing-zone generator (``sample``) and the warehouse read as the
checks compare it, with the checks against a sample's expected state (``warehouse``). The product in
``python_jobs`` never imports this package, with one exception: the demo lands the sample and checks it.
"""
