package placement

import (
	"fmt"
	"strings"
)

// Markdown returns results as two Markdown tables, one row per result: GCS
// egress and load balance, then churn and the hot spot. Column headings name
// the SimResult and HotSpot fields they show.
func Markdown(results []SimResult) string {
	var b strings.Builder
	b.WriteString("| N | D | B | N·B/D | keys/node | epoch 1 egress (×D) | later epochs (×D) | max/mean owned, equal | max/mean owned, half 2× | max owned/weight share |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		c := r.Config
		fit := "∞"
		if c.Budget > 0 {
			fit = fmt.Sprintf("%.2f", float64(c.Nodes)*float64(c.Budget)/float64(r.DatasetBytes))
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
			c.Nodes, bytesString(r.DatasetBytes), budgetString(c.Budget), fit, r.Keys/c.Nodes,
			r.Epoch1Egress, r.LaterEgress, r.Balance, r.HeteroBalance, r.HeteroWeighted)
	}
	b.WriteString("\n| N | join: moved keys | ideal 1/(N+1) | moved/ideal | leave: moved keys | ideal 1/N | moved/ideal | stray moves | hot: chunks | hot: owners | hot: max/mean | hot: time (×S/r_p) |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		n := float64(r.Config.Nodes)
		fmt.Fprintf(&b, "| %d | %.5f | %.5f | %.3f | %.5f | %.5f | %.3f | %d | %d | %d | %.2f | %.2f |\n",
			r.Config.Nodes, r.JoinMovedKeys, 1/(n+1), r.JoinMovedKeys*(n+1),
			r.LeaveMovedKeys, 1/n, r.LeaveMovedKeys*n, r.JoinStray+r.LeaveStray,
			r.Hot.Chunks, r.Hot.Owners, r.Hot.MaxOverMean, r.Hot.Time)
	}
	return b.String()
}

// budgetString is bytesString, with 0 shown as unlimited.
func budgetString(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return bytesString(n)
}

// bytesString formats n in the largest binary unit that divides it, else in
// bytes.
func bytesString(n int64) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}
