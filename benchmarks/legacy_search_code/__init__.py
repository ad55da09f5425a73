"""search_code as it was before issue 12: the regex ran in a killable child
process (regex_worker.py). Kept only as the baseline of
benchmarks/regex_search.py; nothing imports it otherwise."""
