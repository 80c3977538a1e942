package sqlflight

import (
	"testing"

	"github.com/sqlflight/sqlflight/internal/route"
)

// The bypass reasons spelled out in route.go are route's own: a reason
// route.Decide gives is counted under the outcome of the same name.
func TestBypassReasonsAreRoutes(t *testing.T) {
	pairs := [][2]string{
		{bypassExec, route.ReasonExec},
		{bypassTx, route.ReasonTx},
		{bypassSession, route.ReasonSession},
		{bypassWrite, route.ReasonWrite},
		{bypassNotShareable, route.ReasonNotShareable},
		{bypassUnverified, route.ReasonUnverified},
		{bypassPolicy, route.ReasonPolicy},
		{bypassArgs, route.ReasonArgs},
		{bypassTooLarge, route.ReasonTooLarge},
		{bypassBusy, route.ReasonBusy},
		{bypassBadAnnotation, route.ReasonBadAnnotation},
	}
	if len(pairs) != len(bypassReasons(t)) {
		t.Errorf("%d pairs for %d reasons in route.go", len(pairs), len(bypassReasons(t)))
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("root reason %q, route's %q", p[0], p[1])
		}
	}
}
