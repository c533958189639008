// Package hist is the recording side of the library's latency histograms:
// the fixed log-linear bucket layout, a lock-free recorder cheap enough
// for a per-message path, and the plain snapshot it fills. The root
// package's HistogramSnapshot adds the reading side (quantiles, merging)
// on the same layout; the worker pool records into it from below the root.
package hist
