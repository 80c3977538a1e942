package shared

// ForgetScanType makes this process forget the scan type of name, as a
// process that never encoded it knows it not.
func ForgetScanType(name string) { scanTypes.Delete(name) }
