"""A Python check named in a dataset as module:function (tests/evals/data/checks.jsonl)."""


def three_rows(namespace, files):
    """df_clean has the three complete rows of sales.csv."""
    n = len(namespace["df_clean"])
    return n == 3, f"df_clean has {n} rows"
