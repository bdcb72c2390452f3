"""The figures of scripts/benchmark.py: ``report`` runs them, one small function per
printed figure, over ``training`` ((a)-(c), (l)-(n)), ``compute`` ((g), (k)) and
``programs`` ((d)-(f), (h)-(j)); ``measure`` holds the one clock and the medians."""
