"""The trio runtime: listeners, replica bus, ticker, fsync worker and group host."""
