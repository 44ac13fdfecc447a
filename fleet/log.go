package fleet

import (
	"context"
	"log/slog"
	"strings"
)

// logWriter turns memberlist's log lines ("[LEVEL] memberlist: text") into
// records of the agent's logger. Levels map as DEBUG → Debug, INFO → Info,
// and WARN and ERR → Warn: memberlist's errors are about other machines'
// traffic (a packet no installed key decrypts, a peer gone mid-stream, a
// port scanner) and never stop this agent. memberlist calls it from its
// own goroutines, sometimes holding its node lock.
type logWriter struct {
	log *slog.Logger
	// suspect is called with the name of a member this agent's probes
	// found unresponsive (see suspectName).
	suspect func(name string)
}

func (w *logWriter) Write(p []byte) (int, error) {
	level, msg := parseLogLine(string(p))
	if name, ok := suspectName(msg); ok && w.suspect != nil {
		w.suspect(name)
	}
	w.log.Log(context.Background(), level, msg, "component", "memberlist")
	return len(p), nil
}

// parseLogLine splits a memberlist log line into its level and message.
func parseLogLine(line string) (slog.Level, string) {
	line = strings.TrimSpace(line)
	level := slog.LevelInfo
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if tag, msg, ok := strings.Cut(rest, "]"); ok {
			switch tag {
			case "DEBUG":
				level = slog.LevelDebug
			case "INFO":
				level = slog.LevelInfo
			case "WARN", "ERR", "ERROR":
				level = slog.LevelWarn
			}
			line = strings.TrimSpace(msg)
		}
	}
	return level, strings.TrimPrefix(line, "memberlist: ")
}

// The message memberlist v0.7.0 logs when this agent's own probes of a
// member fail and it marks the member suspect (state.go, probeNode).
// memberlist has no event for suspicion, and its node states may only be
// read under its private lock, so this line is how a member's suspect
// state becomes visible without a data race.
const (
	suspectPrefix = "Suspect "
	suspectSuffix = " has failed, no acks received"
)

// suspectName returns the member a log message says this agent suspects.
func suspectName(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, suspectPrefix)
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, suspectSuffix)
	return name, ok && name != ""
}
