package kubernetes_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The repository's root, from this package's directory.
const repoRoot = "../.."

// daemonPkg is the package the image is built from.
const daemonPkg = "./cmd/cacheagent"

// distrolessPath is PATH in every distroless image.
var distrolessPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int    // where it starts, 1-based
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string // the rest, continuations joined with a space
}

// stage is one FROM and the instructions after it.
type stage struct {
	from  string // the image, e.g. golang:1.26-bookworm
	name  string // AS name, "" if none
	instr []instruction
}

// parseDockerfile splits a Dockerfile into stages: comments (parser
// directives among them) and blank lines dropped, lines ending in a
// backslash joined with the next.
func parseDockerfile(t *testing.T, src string) []stage {
	t.Helper()
	var (
		stages []stage
		cur    *instruction
		all    []instruction
	)
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // comments may sit between continuation lines too
		}
		cont := strings.HasSuffix(trimmed, `\`)
		trimmed = strings.TrimSpace(strings.TrimSuffix(trimmed, `\`))
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else if trimmed != "" {
			cur.args = strings.TrimSpace(cur.args + " " + trimmed)
		}
		if !cont {
			all = append(all, *cur)
			cur = nil
		}
	}
	if cur != nil {
		t.Fatalf("Dockerfile:%d: the last instruction ends with a continuation", cur.line)
	}
	for _, in := range all {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			st := stage{}
			switch {
			case len(f) == 1:
				st.from = f[0]
			case len(f) == 3 && strings.EqualFold(f[1], "AS"):
				st.from, st.name = f[0], f[2]
			default:
				t.Fatalf("Dockerfile:%d: FROM %s", in.line, in.args)
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile:%d: %s before the first FROM", in.line, in.cmd)
			}
			continue
		}
		stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
	}
	if len(stages) == 0 {
		t.Fatal("Dockerfile has no FROM")
	}
	return stages
}

// last returns the stage's last instruction cmd, or nil.
func (s stage) last(cmd string) *instruction {
	for i := len(s.instr) - 1; i >= 0; i-- {
		if s.instr[i].cmd == cmd {
			return &s.instr[i]
		}
	}
	return nil
}

// execForm decodes an ENTRYPOINT's or CMD's JSON (exec) form.
func execForm(t *testing.T, in *instruction) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil || len(v) == 0 {
		t.Fatalf("Dockerfile:%d: %s %s: want the exec form, a JSON array (the shell form needs a shell, which distroless lacks)",
			in.line, in.cmd, in.args)
	}
	return v
}

// imageRef splits an image reference into repository and tag (digest
// dropped; "latest" when no tag).
func imageRef(ref string) (repo, tag string) {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

// goList runs go list in the repository's root for the image's platform.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	return goRun(t, append([]string{"list"}, args...)...)
}

// elfInterpreter returns the ELF interpreter (PT_INTERP) of the binary at
// path: "" for a static binary.
func elfInterpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// goRun runs the go command in the repository's root for the image's
// platform (CGO_ENABLED=0, linux) and returns its output.
func goRun(t *testing.T, args ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list %s's dependencies: %v", daemonPkg, err)
	}
	cmd := exec.CommandContext(t.Context(), gobin, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

func TestDockerfileBuildsTheDaemonImage(t *testing.T) {
	m := load(t)
	c := m.agent(t)
	pod := m.ds.Spec.Template.Spec
	stages := parseDockerfile(t, string(read(t, filepath.Join(repoRoot, "Dockerfile"))))
	final := stages[len(stages)-1]

	// The binary: the final stage copies it from a build stage, where it is
	// the output of a cgo-free go build of the daemon's package.
	ep := final.last("ENTRYPOINT")
	if ep == nil {
		t.Fatal("the final stage has no ENTRYPOINT")
	}
	entry := execForm(t, ep)
	bin := entry[0]
	if len(entry) != 1 || path.Base(bin) != "cacheagent" || !path.IsAbs(bin) {
		t.Errorf("ENTRYPOINT %q: want the cacheagent binary alone, by its absolute path", entry)
	}
	// kubectl exec ... -- cacheagent fleet status (docs/operations.md) finds
	// it on the image's PATH.
	if !slices.Contains(distrolessPath, path.Dir(bin)) {
		t.Errorf("ENTRYPOINT %s is not on the image's PATH %v: kubectl exec … -- cacheagent fails", bin, distrolessPath)
	}
	var (
		from, src string
		copied    bool
	)
	for _, in := range final.instr {
		if in.cmd != "COPY" {
			continue
		}
		f := strings.Fields(in.args)
		var opts, paths []string
		for _, s := range f {
			if strings.HasPrefix(s, "--") && len(paths) == 0 {
				opts = append(opts, s)
			} else {
				paths = append(paths, s)
			}
		}
		if len(paths) != 2 {
			continue
		}
		dest := paths[1]
		if strings.HasSuffix(dest, "/") {
			dest = path.Join(dest, path.Base(paths[0]))
		}
		if dest != bin {
			continue
		}
		for _, o := range opts {
			if v, ok := strings.CutPrefix(o, "--from="); ok {
				from = v
			}
		}
		src, copied = paths[0], true
	}
	if !copied || from == "" {
		t.Fatalf("the final stage does not COPY --from a build stage to %s", bin)
	}
	var build *stage
	for i := range stages[:len(stages)-1] {
		if stages[i].name == from {
			build = &stages[i]
		}
	}
	if build == nil {
		t.Fatalf("COPY --from=%s: no stage of that name", from)
	}
	var goBuild []string
	for _, in := range build.instr {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = strings.Fields(in.args)
		}
	}
	if goBuild == nil {
		t.Fatalf("stage %s runs no go build", from)
	}
	gb := 0
	for gb < len(goBuild)-1 && (goBuild[gb] != "go" || goBuild[gb+1] != "build") {
		gb++
	}
	out := slices.Index(goBuild[gb:], "-o") + gb
	switch {
	case !slices.Contains(goBuild[:gb], "CGO_ENABLED=0"):
		t.Errorf("go build without CGO_ENABLED=0 (%s): it would need a C toolchain and link the daemon with cgo",
			strings.Join(goBuild, " "))
	case !slices.Contains(goBuild[gb:], "-trimpath"):
		t.Errorf("go build without -trimpath, unlike scripts/install.sh: %s", strings.Join(goBuild, " "))
	case goBuild[len(goBuild)-1] != daemonPkg:
		t.Errorf("go build builds %s, want the daemon %s", goBuild[len(goBuild)-1], daemonPkg)
	case out < gb || out+1 >= len(goBuild) || goBuild[out+1] != src:
		t.Errorf("go build's -o is not %s, which the final stage copies: %s", src, strings.Join(goBuild, " "))
	}

	// The builder's Go is go.mod's.
	goMod := read(t, filepath.Join(repoRoot, "go.mod"))
	gv := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?\s*$`).FindSubmatch(goMod)
	if gv == nil {
		t.Fatal("go.mod has no go line")
	}
	if repo, tag := imageRef(build.from); repo != "golang" || !strings.HasPrefix(tag, string(gv[1])+"-") &&
		tag != string(gv[1]) && !strings.HasPrefix(tag, string(gv[1])+".") {
		t.Errorf("build stage FROM %s: want golang:%s… (go.mod's go %s%s)", build.from, gv[1], gv[1], gv[2])
	}

	// The base: distroless. gpu/cuda's purego links even a CGO_ENABLED=0
	// binary against glibc; the build leaves it out (-tags nocuda), so the
	// binary is static and distroless/static holds all it needs. Built here
	// as the Dockerfile builds it, the binary must have no ELF interpreter.
	repo, tag := imageRef(final.from)
	variant, ok := strings.CutPrefix(repo, "gcr.io/distroless/")
	if !ok {
		t.Fatalf("final stage FROM %s: want a distroless image (gcr.io/distroless/…)", final.from)
	}
	variant = regexp.MustCompile(`-debian\d+$`).ReplaceAllString(variant, "")
	var tags []string
	if i := slices.Index(goBuild[gb:], "-tags"); i >= 0 && gb+i+1 < len(goBuild) {
		tags = []string{"-tags", goBuild[gb+i+1]}
	}
	if deps := goList(t, append(tags, "-deps", daemonPkg)...); slices.Contains(strings.Fields(deps), "github.com/ebitengine/purego") {
		if !slices.Contains([]string{"base", "base-nossl", "cc"}, variant) {
			t.Errorf("final stage FROM %s: the daemon built %v imports purego, which links it against glibc; "+
				"distroless/%s has none (build with -tags nocuda, or want base-nossl, base or cc)", final.from, tags, variant)
		}
	} else if !testing.Short() {
		bin := filepath.Join(t.TempDir(), "cacheagent")
		goRun(t, append(append([]string{"build"}, tags...), "-trimpath", "-o", bin, daemonPkg)...)
		if interp := elfInterpreter(t, bin); interp != "" {
			t.Errorf("the image's binary (go build %v, CGO_ENABLED=0) is not static: its interpreter is %s", tags, interp)
		}
	}

	// Root: the DaemonSet runs the image's user, privileged. Root mounts
	// FUSE without fusermount3 (not in the image) and writes the root-owned
	// hostPaths; a non-root user in a privileged container has no
	// capabilities.
	user := ""
	if u := final.last("USER"); u != nil {
		user = strings.TrimSpace(u.args)
	} else if strings.Contains(tag, "nonroot") {
		user = "nonroot"
	}
	imageRoot := slices.Contains([]string{"", "0", "root", "0:0", "root:root"}, user)
	var runAs *int64
	var nonRoot bool
	if sc := pod.SecurityContext; sc != nil {
		runAs, nonRoot = sc.RunAsUser, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			runAs = sc.RunAsUser
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
	}
	switch {
	case nonRoot:
		t.Error("the DaemonSet sets runAsNonRoot: the agent needs root (FUSE mount, hostPaths)")
	case runAs != nil && *runAs != 0:
		t.Errorf("the DaemonSet runs the agent as user %d: it needs root (FUSE mount, hostPaths)", *runAs)
	case !imageRoot && runAs == nil:
		t.Errorf("the image runs as %q (FROM %s) and the DaemonSet sets no runAsUser: 0; the agent needs root", user,
			final.from)
	}

	// The DaemonSet runs the entrypoint (no command of its own), and the
	// image's default command is the DaemonSet's: serve with the ConfigMap's
	// file, at the path where the ConfigMap is mounted.
	if len(c.Command) > 0 && !slices.Equal(c.Command, entry) {
		t.Errorf("the DaemonSet's command %q is not the image's entrypoint %q", c.Command, entry)
	}
	cm := final.last("CMD")
	if cm == nil {
		t.Fatal("the final stage has no CMD")
	}
	cmd := execForm(t, cm)
	i := slices.Index(cmd, "--config")
	if cmd[0] != "serve" || i < 0 || i+1 >= len(cmd) {
		t.Fatalf("CMD %q: want serve --config FILE", cmd)
	}
	vm := mountOf(t, c, cmd[i+1])
	if v := m.volume(t, vm.Name); v.ConfigMap == nil || v.ConfigMap.Name != m.cm.Name ||
		path.Join(vm.MountPath, "cacheagent.yaml") != cmd[i+1] {
		t.Errorf("CMD's --config %s is not the ConfigMap %s's cacheagent.yaml (volume %s at %s)", cmd[i+1], m.cm.Name,
			vm.Name, vm.MountPath)
	}
	if len(c.Args) > 0 && !slices.Equal(c.Args, cmd) {
		t.Errorf("the DaemonSet's args %q differ from the image's CMD %q", c.Args, cmd)
	}

	// kustomization.yaml points the DaemonSet's image at the Dockerfile's.
	var k kustomization
	strict(t, "kustomization.yaml", &k)
	if len(k.Images) != 1 || k.Images[0].Name != c.Image || k.Images[0].NewName == "" ||
		path.Base(k.Images[0].NewName) != "cacheagent" {
		t.Errorf("kustomization.yaml images %+v: want one entry, name %q (the DaemonSet's image), newName …/cacheagent",
			k.Images, c.Image)
	}
	kust := string(read(t, "kustomization.yaml"))
	for _, want := range []string{"Dockerfile", "docker build -t ", "kustomize edit set image " + c.Image + "="} {
		if !strings.Contains(kust, want) {
			t.Errorf("kustomization.yaml does not say how the image is built and named (no %q)", want)
		}
	}
}

func TestDockerignoreKeepsTheBuildsInputs(t *testing.T) {
	var patterns []string
	for line := range strings.Lines(string(read(t, filepath.Join(repoRoot, ".dockerignore")))) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	ignored := func(f string) bool { return dockerignored(t, patterns, f) }
	if !ignored(".git") || !ignored(".git/HEAD") {
		t.Error(".dockerignore does not exclude .git")
	}
	// Its own check.
	if ignored("go.mod") || !ignored("python/src/cacheagent/__init__.py") || !ignored("a/b/__pycache__/x.pyc") {
		t.Fatalf("dockerignored misreads %q", patterns)
	}
	// Every file the daemon's build reads: go.mod, go.sum and the source
	// files of the module's packages it imports.
	files := []string{"go.mod", "go.sum"}
	out := goList(t, "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}`+
			`{{range .SFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
		daemonPkg)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for f := range strings.Lines(out) {
		rel, err := filepath.Rel(root, strings.TrimSpace(f))
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("%s is outside the repository %s", f, root)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 10 {
		t.Fatalf("go list found only %v", files)
	}
	for _, f := range files {
		if ignored(f) {
			t.Errorf(".dockerignore excludes %s, which go build %s reads", f, daemonPkg)
		}
	}
}

// dockerignored reports whether .dockerignore's patterns exclude file f (a
// slash-separated path relative to the build context), as Docker reads them:
// patterns relative to the context's root (a leading / is dropped), * and ?
// within one path element, ** across any number, a pattern that matches a
// directory excludes what is below it, ! re-includes, the last match wins.
func dockerignored(t *testing.T, patterns []string, f string) bool {
	t.Helper()
	excluded := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = path.Clean(strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/"))
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch ch := p[i]; {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case ch == '*':
				re.WriteString("[^/]*")
			case ch == '?':
				re.WriteString("[^/]")
			case ch == '[':
				j := strings.IndexByte(p[i:], ']')
				if j < 0 {
					t.Fatalf(".dockerignore pattern %q: unclosed [", p)
				}
				re.WriteString(p[i : i+j+1])
				i += j
			case ch == '\\':
				t.Fatalf(".dockerignore pattern %q: escapes are not understood here", p)
			default:
				re.WriteString(regexp.QuoteMeta(string(ch)))
			}
		}
		re.WriteString("(/.*)?$")
		if regexp.MustCompile(re.String()).MatchString(f) {
			excluded = !neg
		}
	}
	return excluded
}
