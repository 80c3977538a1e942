package shared

// ForgetScanType makes this process forget the scan type of name, as a
// process that never encoded it knows it not.
func ForgetScanType(name string) { scanTypes.Delete(name) }

// Len returns the tables whose floors f keeps one by one.
func (f *Floor) Len() int { return f.e.Len() }

// AllEpoch returns f's floor of every table.
func (f *Floor) AllEpoch() uint64 { return f.e.AllEpoch() }

// MaxLearnedSets is maxLearnedSets.
const MaxLearnedSets = maxLearnedSets
