package daemon

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvFields lists the config keys whose values may name environment
// variables as ${NAME}: the per-agent ones, which differ between the agents
// of a fleet that share one config file (a Kubernetes DaemonSet's
// ConfigMap gives every pod the same file, and its downward API the node's
// name and the pod's IP in the environment). Every other value is taken as
// written.
var EnvFields = []string{"metrics.listen", "fleet.name", "fleet.listen", "fleet.peer_listen", "fleet.join"}

// expandEnv replaces the ${NAME} references in c's EnvFields with the
// values lookup gives (os.LookupEnv). A variable that is unset or empty is
// an error: a pod spec that forgot it must not start an agent listening on
// every interface or named after the pod.
func (c *Config) expandEnv(lookup func(string) (string, bool)) *fieldError {
	exp := func(v *string, path ...string) *fieldError {
		s, err := expandEnv(*v, lookup)
		if err != nil {
			return &fieldError{path: path, msg: err.Error()}
		}
		*v = s
		return nil
	}
	if err := exp(&c.Metrics.Listen, "metrics", "listen"); err != nil {
		return err
	}
	f := c.Fleet
	if f == nil {
		return nil
	}
	for _, e := range []struct {
		v   *string
		key string
	}{{&f.Name, "name"}, {&f.Listen, "listen"}, {&f.PeerListen, "peer_listen"}} {
		if err := exp(e.v, "fleet", e.key); err != nil {
			return err
		}
	}
	for i := range f.Join {
		if err := exp(&f.Join[i], "fleet", "join", strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

// expandEnv replaces every ${NAME} in s (NAME: a letter or _, then letters,
// digits and _) with lookup(NAME), and $${ with a literal ${. Any other $
// stays as it is.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' { // $${: a literal ${
			b.WriteString(s[:i])
			b.WriteString("{")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("%q: unterminated ${ (want ${NAME}; $${ for a literal ${)", s[i:])
		}
		name := s[i+2 : i+end]
		if !isEnvName(name) {
			return "", fmt.Errorf("%q: not a variable name (want ${NAME}; $${ for a literal ${)", s[i:i+end+1])
		}
		v, ok := lookup(name)
		switch {
		case !ok:
			return "", fmt.Errorf("${%s}: environment variable %s is not set", name, name)
		case v == "":
			return "", fmt.Errorf("${%s}: environment variable %s is empty", name, name)
		}
		b.WriteString(v)
		s = s[i+end+1:]
	}
}

// isEnvName reports whether s is a variable name: a letter or _, then
// letters, digits and _.
func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
