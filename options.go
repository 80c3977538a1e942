package sqlflight

// resolveDefaults fills in every zero field of o that has a default: the
// one place the Shield's defaults are resolved (New calls it once, before
// anything reads o).
func resolveDefaults(o *Options) {
	if o.MaxResultRows <= 0 {
		o.MaxResultRows = DefaultMaxResultRows
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = DefaultMaxResultBytes
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.NegMaxBytes <= 0 {
		o.NegMaxBytes = max(o.MaxBytes/8, 1)
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.OriginTimeout <= 0 {
		o.OriginTimeout = DefaultOriginTimeout
	}
	// The guard's.
	if o.MaxInflight <= 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.MaxRefreshes <= 0 {
		o.MaxRefreshes = max(1, o.MaxInflight/4)
	}
	if o.QueueTimeout <= 0 {
		o.QueueTimeout = DefaultQueueTimeout
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerTimeout <= 0 {
		o.BreakerTimeout = DefaultBreakerTimeout
	}
	if o.BreakerProbes <= 0 {
		o.BreakerProbes = DefaultBreakerProbes
	}
}
