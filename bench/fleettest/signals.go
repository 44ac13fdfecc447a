package fleettest

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// live holds the harnesses not closed yet, for the signal handler.
var (
	liveMu   sync.Mutex
	live     = map[*Harness]bool{}
	sigsOnce sync.Once
)

// track registers h for cleanup on SIGINT, SIGTERM and SIGHUP: the first
// such signal closes every live harness (processes killed and reaped,
// namespaces deleted) and exits with status 2. A SIGKILLed process cannot
// clean up: its daemons die with it (Pdeathsig) and the next Start
// removes its namespaces (RemoveLeftovers).
func track(h *Harness) {
	sigsOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		go func() {
			<-ch
			liveMu.Lock()
			hs := make([]*Harness, 0, len(live))
			for h := range live {
				hs = append(hs, h)
			}
			liveMu.Unlock()
			for _, h := range hs {
				h.Close()
			}
			os.Exit(2)
		}()
	})
	liveMu.Lock()
	live[h] = true
	liveMu.Unlock()
}

func untrack(h *Harness) {
	liveMu.Lock()
	delete(live, h)
	liveMu.Unlock()
}
