"""Analysis: the statistics and the version/variant comparisons built on them."""
