package integration

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The history and the offline check of TestDifferential.
//
// Every object (a row's version, a group's row count, the smallest key left
// in a group) is written by exactly one writer goroutine, one write at a
// time, and every committed write moves it to the next version: its history
// is the list of versions 0, 1, 2, … with, for each, when the write that made
// it was sent and when it returned (after COMMIT, or after Invalidate for
// writes made behind the Shield's back). Times come from the process's
// monotonic clock. A write that failed is resolved by reading the object on
// a raw connection and recording whatever it committed as returned at that
// moment, which only ever widens the window the checker allows.
//
// A version may also be made behind the Shield's back (by an outside
// client, out[v]), which the Shield learns of only through its change
// feed: such a version is not owed to a reader by read-your-writes, only
// within its policy's allowance, or diffFeedAllow when that is shorter.

// diffObj is one object and its committed history.
type diffObj struct {
	name  string
	shape int // the shape that reads it, at key, column col (the raw oracle uses it too)
	key   int
	col   int
	start []int64 // start[v]: when the write that made version v was sent (0 for the initial state)
	ret   []int64 // ret[v]: when it returned
	via   []string
	by    []uint8 // by[v]: the fleet instance whose writer made version v (fleet workloads)
	out   []bool  // out[v]: version v was written by an outside client, not through the Shield
}

func newDiffObj(name string, shape, key, col int) *diffObj {
	return &diffObj{name: name, shape: shape, key: key, col: col, start: []int64{0}, ret: []int64{0}, via: []string{"setup"}, by: []uint8{0}, out: []bool{false}}
}

// cur is the object's last committed version.
func (o *diffObj) cur() int64 { return int64(len(o.ret) - 1) }

func (o *diffObj) commit(start, ret int64, via string, by uint8, out bool) {
	o.start = append(o.start, start)
	o.by = append(o.by, by)
	o.out = append(o.out, out)
	o.ret = append(o.ret, ret)
	o.via = append(o.via, via)
}

// diffRead is one read through the Shield.
type diffRead struct {
	start, end int64 // monotonic nanoseconds since the run began
	shape      uint8
	pol        uint8
	inst       uint8 // the fleet instance that served it (fleet workloads)
	key        int32
	raw        [2]int64
}

// Kinds of violation.
const (
	vPhantom   = "phantom"    // a value no committed state ever had (a rolled-back or torn value)
	vFuture    = "future"     // a version whose write was sent only after the read returned (or ran at another time than its caller's call: a shared volatile call)
	vRYW       = "ryw"        // older than a write through the same Shield that returned before the read began
	vStale     = "stale"      // older than the reader's own policy allows (writes the Shield could not know about)
	vFeed      = "feed"       // older than an outside write the change feed should have reported long before (diffFeedAllow)
	vWrongRow  = "wrong-row"  // a keyed read returned another key's row, or not exactly one row
	vLostWrite = "lost-write" // a write through the driver did not happen (or returned another write's result)
	vTxRead    = "tx-read"    // a read inside a transaction did not see the transaction's own write
	vHistory   = "history"    // the database's final state disagrees with the recorded history

	// Fleets (differential_fleet_test.go); ryw there is the writing instance's.
	vFleetHeard = "heard"    // older than a write whose message the reading instance had applied before the read began
	vFleetTier  = "tier"     // on an instance without L1, older than a write whose publication returned before the read began
	vFleetLost  = "lost-msg" // a message an instance that listened never applied
)

var diffKinds = []string{vPhantom, vFuture, vRYW, vStale, vFeed, vWrongRow, vLostWrite, vTxRead, vHistory, vFleetHeard, vFleetTier, vFleetLost}

type diffViolation struct {
	kind string
	msg  string
}

func ms(ns int64) string { return fmt.Sprintf("%.3fms", float64(ns)/1e6) }

// diffFeedAllow is how long after an outside write returned a read may
// still return the version before it, when the reader's policy allows
// longer: the change feed is not bound to any deadline, but on one machine
// it reports a commit within milliseconds (docs/measurements.md), so a
// second means it did not report the write, or something kept a result
// from before it past the invalidation.
const diffFeedAllow = time.Second

// nextOwn returns the first version after v made through the Shield, or
// -1 when every later version was made by an outside client.
func (o *diffObj) nextOwn(v int64) int64 {
	for u := v + 1; u <= o.cur(); u++ {
		if !o.out[u] {
			return u
		}
	}
	return -1
}

// check judges every read of c against its objects' histories.
func (c *diffClass) check() []diffViolation {
	var out []diffViolation
	c.worstLag = map[uint8]int64{}
	c.worstFeedLag = 0
	for _, rs := range c.reads {
		for i := range rs {
			r := &rs[i]
			sh := c.shapes[r.shape]
			pol := diffPolicies[r.pol]
			objs := sh.objs(int(r.key))
			vers := sh.versions(int(r.key), r.raw[:sh.cols])
			for j, oi := range objs {
				o := c.objs[oi]
				v := vers[j]
				final := o.cur()
				kind, why := "", ""
				fkind, fwhy := "", ""
				own, allow := int64(-1), pol.allow
				if v >= 0 && v < final {
					own = o.nextOwn(v)
					if o.out[v+1] {
						allow = min(allow, diffFeedAllow)
					}
				}
				if c.fleet != nil && v >= 0 && v < final {
					fkind, fwhy = c.fleet.judge(c, r, oi, v)
				}
				switch {
				case v < 0 || v > final:
					kind, why = vPhantom, fmt.Sprintf("no committed state of %s is %d", o.name, v)
				case v >= 1 && o.start[v] > r.end:
					kind, why = vFuture, fmt.Sprintf("version %d was written only at %s, after the read returned", v, ms(o.start[v]))
				case fkind != "":
					kind, why = fkind, fwhy
				case v < final && c.fleet == nil && !c.foreign() && own > 0 && o.ret[own] < r.start:
					kind, why = vRYW, fmt.Sprintf("version %d (%s through this Shield) returned at %s, %v before the read began",
						own, o.via[own], ms(o.ret[own]), time.Duration(r.start-o.ret[own]))
				case v < final && o.ret[v+1] < r.start-int64(allow+diffSlack):
					kind, why = vStale, fmt.Sprintf("version %d returned at %s, %v before the read began; policy %s allows %v (+%v slack)",
						v+1, ms(o.ret[v+1]), time.Duration(r.start-o.ret[v+1]), pol.name, allow, diffSlack)
					if allow < pol.allow {
						kind, why = vFeed, fmt.Sprintf("version %d (%s, outside the Shield) returned at %s, %v before the read began; the change feed had %v (+%v slack) to report it (policy %s allows %v)",
							v+1, o.via[v+1], ms(o.ret[v+1]), time.Duration(r.start-o.ret[v+1]), allow, diffSlack, pol.name, pol.allow)
					}
				}
				if kind == "" {
					if v < final && r.start-o.ret[v+1] > c.worstLag[r.pol] {
						c.worstLag[r.pol] = r.start - o.ret[v+1]
					}
					if v < final && o.out[v+1] && r.start-o.ret[v+1] > c.worstFeedLag {
						c.worstFeedLag = r.start - o.ret[v+1]
					}
					continue
				}
				out = append(out, diffViolation{kind, fmt.Sprintf(
					"%s: read of shape %q under policy %q, key %d%s, ran [%s, %s], returned %v: %s = version %d: %s\n%s",
					kind, sh.name, pol.name, r.key, c.onInstance(r), ms(r.start), ms(r.end), r.raw[:sh.cols], o.name, v, why, c.around(o, v))})
			}
		}
	}
	return out
}

// around describes the history of o near version v.
func (o *diffObj) around(v int64) string {
	var b strings.Builder
	lo, hi := max(v-2, 0), min(v+3, o.cur())
	if v < 0 || v > o.cur() {
		lo, hi = max(o.cur()-3, 0), o.cur()
	}
	fmt.Fprintf(&b, "\thistory of %s (versions %d..%d of %d):", o.name, lo, hi, o.cur())
	for u := lo; u <= hi; u++ {
		mark := ""
		if u == v {
			mark = "  <- read"
		}
		fmt.Fprintf(&b, "\n\t  v%d by %s, sent %s, returned %s%s", u, o.via[u], ms(o.start[u]), ms(o.ret[u]), mark)
	}
	return b.String()
}

// summary is a table of the classes' counts.
func diffSummary(classes []*diffClass, counts map[string]map[string]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s %8s %7s %8s", "workload", "reads", "writes", "versions")
	for _, k := range diffKinds {
		fmt.Fprintf(&b, " %10s", k)
	}
	fmt.Fprintf(&b, " %6s %6s\n", "shed", "errors")
	for _, c := range classes {
		versions := 0
		for _, o := range c.objs {
			versions += int(o.cur())
		}
		fmt.Fprintf(&b, "%-11s %8d %7d %8d", c.name, c.readOps.Load(), c.writeOps.Load(), versions)
		for _, k := range diffKinds {
			fmt.Fprintf(&b, " %10d", counts[c.name][k])
		}
		fmt.Fprintf(&b, " %6d %6d\n", c.shed.Load(), c.errCount.Load())
	}
	return b.String()
}

// policyCounts says how many reads each policy made and, of those the
// check accepted, how long before the read began the value it returned was
// superseded at worst: how close the run came to the limits (for tuning
// diffSlack on a loaded machine).
func (c *diffClass) policyCounts() string {
	n := map[string]string{}
	counts := map[uint8]int{}
	for _, rs := range c.reads {
		for i := range rs {
			counts[rs[i].pol]++
		}
	}
	for p, k := range counts {
		n[diffPolicies[p].name] = fmt.Sprintf("%d (worst accepted lag %v)", k, time.Duration(c.worstLag[p]).Round(time.Millisecond))
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %s", k, n[k])
	}
	return strings.Join(parts, "; ")
}
