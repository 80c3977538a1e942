package verdict

// MemoKeys returns the keys of b's verdict memo.
func (b *Book[R]) MemoKeys() []string {
	var keys []string
	if vm := b.verdicts.Load(); vm != nil {
		vm.m.Range(func(k string, _ *Verdict[R]) bool {
			keys = append(keys, k)
			return true
		})
	}
	return keys
}

// MemoKey and MaxVerdictKey are memoKey and maxVerdictKey.
var MemoKey = memoKey

const MaxVerdictKey = maxVerdictKey
