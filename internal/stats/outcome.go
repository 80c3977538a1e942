package stats

// Outcome is how one call was served: a path through the cache and the
// flights, or the reason it bypassed them (OutBypass + the reason's index
// in BypassReasons).
type Outcome uint8

// The outcomes of a call.
const (
	OutNone     Outcome = iota // not decided (or not a read that was planned)
	OutFresh                   // served fresh from the cache
	OutStale                   // served stale from the cache
	OutNegative                // served an empty result from the cache
	OutFollower                // served by a flight another call led
	OutMiss                    // served by a flight this call led
	OutBypass                  // straight from the database: the first bypass reason
)

// BypassReasons are the reasons a statement bypasses sharing, as the
// driver's routing names them (Stats.BypassReasons keys), in the order of
// their outcomes. The driver's own list must match it (its tests check).
var BypassReasons = [...]string{"exec", "transaction", "session", "write", "not shareable",
	"unverified", "policy", "arguments", "too large", "busy connection", "bad annotation"}

// NumOutcomes is the number of distinct outcomes, OutNone included.
const NumOutcomes = int(OutBypass) + len(BypassReasons)

// Outcomes the hot path names.
const (
	OutBypassExec   = OutBypass     // an exec (a write, or a statement run by Exec)
	OutBypassWrite  = OutBypass + 3 // a read that writes or locks
	OutBypassPolicy = OutBypass + 6 // a read whose policy is off
)

// reasonPolicy is the bypass reason of a policy that is off.
var reasonPolicy = BypassReasons[OutBypassPolicy-OutBypass]

// BypassOutcome is the outcome of a bypass for reason: OutNone for the
// empty reason and for a reason not in BypassReasons.
func BypassOutcome(reason string) Outcome {
	switch reason {
	case "":
		return OutNone
	case BypassReasons[OutBypassWrite-OutBypass]: // the common ones first
		return OutBypassWrite
	case reasonPolicy:
		return OutBypassPolicy
	}
	for i, r := range BypassReasons {
		if r == reason {
			return OutBypass + Outcome(i)
		}
	}
	return OutNone
}

// PathNames name the latency paths: an outcome's histogram (every bypass
// shares the last one).
var PathNames = [...]string{"fresh", "stale", "negative", "follower", "miss", "bypass"}

// Path is the index in PathNames of o's latency histogram; o must not be
// OutNone.
func (o Outcome) Path() int { return int(min(o, OutBypass)) - 1 }
