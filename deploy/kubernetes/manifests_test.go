package kubernetes_test

import (
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cacheagent/cacheagent/daemon"
)

// Example values for the downward API's variables.
const (
	exampleNodeName = "gke-train-a3-pool-3f1c"
	examplePodIP    = "10.8.4.17"
)

// manifests are the directory's resources, decoded.
type manifests struct {
	ds  *appsv1.DaemonSet
	svc *corev1.Service
	cm  *corev1.ConfigMap
	sa  *corev1.ServiceAccount
	np  *networkingv1.NetworkPolicy // optional
}

// kustomization is what kustomization.yaml sets.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	// Images points the DaemonSet's image at the one the repository's
	// Dockerfile builds (image_test.go).
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// load decodes every file of kustomization.yaml's resources strictly into
// its k8s.io/api type.
func load(t *testing.T) manifests {
	t.Helper()
	var k kustomization
	strict(t, "kustomization.yaml", &k)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %s %s", k.APIVersion, k.Kind)
	}
	// Every manifest of the directory is a resource of the kustomization,
	// or an optional one that it names in a comment; all are checked.
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	kust := string(read(t, "kustomization.yaml"))
	for _, f := range files {
		if !slices.Contains(k.Resources, f) && !strings.Contains(kust, "# - "+f+"\n") {
			t.Errorf("%s is neither a resource of kustomization.yaml nor named there as optional", f)
		}
	}
	for _, f := range k.Resources {
		if !slices.Contains(files, f) {
			t.Errorf("kustomization.yaml lists %s, which is not in the directory", f)
		}
	}
	var m manifests
	for _, f := range files {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(read(t, f), &tm); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var obj metav1.Object
		switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
		case "apps/v1 DaemonSet":
			m.ds = new(appsv1.DaemonSet)
			obj = m.ds
		case "v1 Service":
			m.svc = new(corev1.Service)
			obj = m.svc
		case "v1 ConfigMap":
			m.cm = new(corev1.ConfigMap)
			obj = m.cm
		case "v1 ServiceAccount":
			m.sa = new(corev1.ServiceAccount)
			obj = m.sa
		case "networking.k8s.io/v1 NetworkPolicy":
			m.np = new(networkingv1.NetworkPolicy)
			obj = m.np
		default:
			t.Fatalf("%s: unexpected %s", f, gvk)
		}
		strict(t, f, obj)
		if obj.GetNamespace() != "" {
			t.Errorf("%s: names namespace %q; the manifests are namespace-agnostic", f, obj.GetNamespace())
		}
		if obj.GetLabels()["app.kubernetes.io/name"] != "cacheagent" {
			t.Errorf("%s: labels %v lack app.kubernetes.io/name: cacheagent", f, obj.GetLabels())
		}
	}
	if m.ds == nil || m.svc == nil || m.cm == nil || m.sa == nil {
		t.Fatalf("want a DaemonSet, a Service, a ConfigMap and a ServiceAccount; got %+v", m)
	}
	if len(k.Images) != 1 || k.Images[0].Name != m.agent(t).Image {
		t.Errorf("kustomization.yaml images %+v do not name the container's image %q", k.Images, m.agent(t).Image)
	}
	return m
}

// read returns a file's contents.
func read(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// strict decodes the YAML file f into v: unknown and duplicate fields are
// errors, as in kubectl apply --validate=strict.
func strict(t *testing.T, f string, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(read(t, f), v); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
}

// agent returns the DaemonSet's one container.
func (m manifests) agent(t *testing.T) *corev1.Container {
	t.Helper()
	if n := len(m.ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("DaemonSet has %d containers, want 1", n)
	}
	return &m.ds.Spec.Template.Spec.Containers[0]
}

// config parses the ConfigMap's cacheagent.yaml with the daemon's loader,
// the downward API's variables set to example values as the DaemonSet sets
// them; it checks that the config names no other variable.
func (m manifests) config(t *testing.T) daemon.Config {
	t.Helper()
	doc, ok := m.cm.Data["cacheagent.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no cacheagent.yaml", m.cm.Name)
	}
	env := map[string]string{} // name → downward API field
	for _, e := range m.agent(t).Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	example := map[string]string{"spec.nodeName": exampleNodeName, "status.podIP": examplePodIP}
	for _, ref := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(doc, -1) {
		field, ok := env[ref[1]]
		if !ok {
			t.Fatalf("cacheagent.yaml uses ${%s}, which the container's env does not set from the downward API", ref[1])
		}
		v, ok := example[field]
		if !ok {
			t.Fatalf("%s comes from %s, which has no example value here", ref[1], field)
		}
		t.Setenv(ref[1], v)
	}
	c, err := daemon.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatalf("ConfigMap's cacheagent.yaml: %v", err)
	}
	return c
}

// port returns the container port named name with protocol proto.
func port(t *testing.T, c *corev1.Container, name string, proto corev1.Protocol) corev1.ContainerPort {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			if p.Protocol != proto {
				t.Errorf("container port %s is %s, want %s", name, p.Protocol, proto)
			}
			return p
		}
	}
	t.Fatalf("container has no port named %s", name)
	return corev1.ContainerPort{}
}

// listenPort returns the port of an IP:port listen address.
func listenPort(t *testing.T, key, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	return int32(n)
}

// volume returns the pod's volume named name.
func (m manifests) volume(t *testing.T, name string) corev1.Volume {
	t.Helper()
	for _, v := range m.ds.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("DaemonSet has no volume %s", name)
	return corev1.Volume{}
}

// mountOf returns the container's volume mount at or above path p.
func mountOf(t *testing.T, c *corev1.Container, p string) corev1.VolumeMount {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if within(p, vm.MountPath) {
			return vm
		}
	}
	t.Fatalf("%s is on no volume of the container (mounts %+v)", p, c.VolumeMounts)
	return corev1.VolumeMount{}
}

// within reports whether path p is dir or below it.
func within(p, dir string) bool {
	p, dir = path.Clean(p), path.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func TestManifestsDecodeStrictly(t *testing.T) {
	load(t)
	// And strictness is real: an unknown field fails.
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: DaemonSet\nspec: {template: {spec: {hostNetwrok: true}}}\n"), &ds); err == nil {
		t.Error("a misspelt field decoded without error")
	}
}

func TestServiceSelectsTheAgents(t *testing.T) {
	m := load(t)
	svc, ds := m.svc.Spec, m.ds.Spec
	if svc.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service clusterIP %q, want None (headless: DNS lists every agent)", svc.ClusterIP)
	}
	if !svc.PublishNotReadyAddresses {
		t.Error("Service must publish not-ready addresses: agents find each other before they are ready")
	}
	if len(svc.Selector) == 0 {
		t.Fatal("Service selects nothing")
	}
	pod := ds.Template.Labels
	for k, v := range svc.Selector {
		if pod[k] != v {
			t.Errorf("Service selects %s=%s; the pods have %v", k, v, pod)
		}
	}
	sel, err := metav1.LabelSelectorAsMap(ds.Selector)
	if err != nil || len(ds.Selector.MatchExpressions) > 0 {
		t.Fatalf("DaemonSet selector %+v: want matchLabels only (%v)", ds.Selector, err)
	}
	for k, v := range sel {
		if pod[k] != v {
			t.Errorf("DaemonSet selects %s=%s; its pods have %v", k, v, pod)
		}
	}
	// Every Service port reaches the container port of its name.
	c := m.agent(t)
	for _, sp := range svc.Ports {
		cp := port(t, c, sp.TargetPort.String(), sp.Protocol)
		if cp.ContainerPort != sp.Port {
			t.Errorf("Service port %s is %d; the container's %s is %d", sp.Name, sp.Port, cp.Name, cp.ContainerPort)
		}
	}
	if m.ds.Spec.Template.Spec.ServiceAccountName != m.sa.Name {
		t.Errorf("pods run as %q; the ServiceAccount is %q", m.ds.Spec.Template.Spec.ServiceAccountName, m.sa.Name)
	}
}

func TestConfigMatchesThePod(t *testing.T) {
	m := load(t)
	cfg := m.config(t)
	c := m.agent(t)
	pod := m.ds.Spec.Template.Spec
	f := cfg.Fleet
	if f == nil {
		t.Fatal("the ConfigMap's config has no fleet section")
	}
	if f.Name != exampleNodeName {
		t.Errorf("fleet.name %q, want the node's name %q (stable across pod restarts)", f.Name, exampleNodeName)
	}
	if f.Insecure || f.KeyFile == "" {
		t.Errorf("fleet runs without a key (key_file %q, insecure %v)", f.KeyFile, f.Insecure)
	}

	// The ports: gossip (TCP and UDP), peer and metrics, in the config, the
	// container and the Service alike.
	gossip := listenPort(t, "fleet.listen", f.Listen)
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		name := map[corev1.Protocol]string{corev1.ProtocolTCP: "gossip", corev1.ProtocolUDP: "gossip-udp"}[proto]
		if p := port(t, c, name, proto); p.ContainerPort != gossip {
			t.Errorf("container port %s is %d; fleet.listen is %s", name, p.ContainerPort, f.Listen)
		}
	}
	if p := port(t, c, "peer", corev1.ProtocolTCP); p.ContainerPort != listenPort(t, "fleet.peer_listen", f.PeerListen) {
		t.Errorf("container port peer is %d; fleet.peer_listen is %s", p.ContainerPort, f.PeerListen)
	}
	metricsPort := port(t, c, "metrics", corev1.ProtocolTCP)
	if metricsPort.ContainerPort != listenPort(t, "metrics.listen", cfg.Metrics.Listen) {
		t.Errorf("container port metrics is %d; metrics.listen is %s", metricsPort.ContainerPort, cfg.Metrics.Listen)
	}
	// The listen addresses are the pod's: the kubelet probes and the other
	// agents dial the pod IP (a loopback metrics address would fail every
	// probe).
	for key, addr := range map[string]string{"fleet.listen": f.Listen, "fleet.peer_listen": f.PeerListen,
		"metrics.listen": cfg.Metrics.Listen} {
		if host, _, _ := net.SplitHostPort(addr); host != examplePodIP {
			t.Errorf("%s %q does not listen on the pod IP", key, addr)
		}
	}
	svcPorts := map[string]corev1.ServicePort{}
	for _, sp := range m.svc.Spec.Ports {
		svcPorts[sp.Name] = sp
	}
	for name, want := range map[string]struct {
		port  int32
		proto corev1.Protocol
	}{"gossip": {gossip, corev1.ProtocolTCP}, "gossip-udp": {gossip, corev1.ProtocolUDP},
		"peer": {listenPort(t, "fleet.peer_listen", f.PeerListen), corev1.ProtocolTCP}} {
		if sp, ok := svcPorts[name]; !ok || sp.Port != want.port || sp.Protocol != want.proto {
			t.Errorf("Service port %s: %+v, want %d/%s", name, sp, want.port, want.proto)
		}
	}

	// join names the headless Service at the gossip port.
	if len(f.Join) == 0 {
		t.Fatal("fleet.join is empty: the agents would never meet")
	}
	for _, j := range f.Join {
		host, p, err := net.SplitHostPort(j)
		if err != nil {
			t.Fatal(err)
		}
		if host != m.svc.Name && !strings.HasPrefix(host, m.svc.Name+".") {
			t.Errorf("fleet.join %q does not name the headless Service %s", j, m.svc.Name)
		}
		if p != strconv.Itoa(int(gossip)) {
			t.Errorf("fleet.join %q: port is not the gossip port %d", j, gossip)
		}
	}
	// A pod on the host network resolves Service names only with this DNS
	// policy.
	if pod.HostNetwork && pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork with dnsPolicy %q cannot resolve %v", pod.DNSPolicy, f.Join)
	}

	// The probes ask the metrics server's health routes.
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe,
		"startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: %+v, want an HTTP GET of the metrics server", name, p)
			continue
		}
		if p.HTTPGet.Port.String() != metricsPort.Name && p.HTTPGet.Port.IntValue() != int(metricsPort.ContainerPort) {
			t.Errorf("%s probe asks port %s, not metrics", name, p.HTTPGet.Port.String())
		}
		if p.HTTPGet.Path != "/readyz" && p.HTTPGet.Path != "/healthz" {
			t.Errorf("%s probe asks %s: the metrics server has /readyz and /healthz", name, p.HTTPGet.Path)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe asks %s, want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v: want cpu and memory", c.Resources.Requests)
	}
	// The daemon leaves the fleet, then exits within 10 s of SIGTERM.
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 15 {
		t.Errorf("terminationGracePeriodSeconds %v: want at least 15", g)
	}

	// The config file the container reads is the ConfigMap's.
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("container args %v: no --config", c.Args)
	}
	vm := mountOf(t, c, c.Args[i+1])
	v := m.volume(t, vm.Name)
	if v.ConfigMap == nil || v.ConfigMap.Name != m.cm.Name || path.Join(vm.MountPath, "cacheagent.yaml") != c.Args[i+1] {
		t.Errorf("--config %s is not the ConfigMap %s's cacheagent.yaml (volume %+v at %s)", c.Args[i+1], m.cm.Name,
			v.VolumeSource, vm.MountPath)
	}
}

func TestFleetKeyIsASecretMountedReadOnly(t *testing.T) {
	m := load(t)
	cfg := m.config(t)
	c := m.agent(t)
	vm := mountOf(t, c, cfg.Fleet.KeyFile)
	if !vm.ReadOnly {
		t.Errorf("the key's volume %s is mounted read-write", vm.Name)
	}
	v := m.volume(t, vm.Name)
	s := v.Secret
	if s == nil {
		t.Fatalf("fleet.key_file %s is on volume %s, not a Secret", cfg.Fleet.KeyFile, vm.Name)
	}
	if s.SecretName != "cacheagent-fleet-key" {
		t.Errorf("Secret %q: the docs create cacheagent-fleet-key", s.SecretName)
	}
	// The daemon refuses a key that group or others may write, and warns
	// about one others may read (a Secret volume's default is 0644).
	mode := s.DefaultMode
	for _, it := range s.Items {
		if it.Mode != nil {
			mode = it.Mode
		}
	}
	if mode == nil {
		t.Error("the key's Secret volume has no defaultMode: 0644, readable by every user of the node")
	} else if *mode&0o077&^0o040 != 0 || *mode&0o400 == 0 {
		t.Errorf("key file mode %#o: want 0400 or 0440", *mode)
	}
	// The file is the Secret's key fleet.key (kubectl create secret generic
	// --from-file=fleet.key), at the path the config names.
	name := path.Base(cfg.Fleet.KeyFile)
	for _, it := range s.Items {
		if it.Path == name {
			name = it.Key
		}
	}
	if name != "fleet.key" || path.Dir(cfg.Fleet.KeyFile) != path.Clean(vm.MountPath) {
		t.Errorf("key_file %s is not the Secret's fleet.key mounted at %s", cfg.Fleet.KeyFile, vm.MountPath)
	}
}

func TestHostPathsAndTheFUSEMount(t *testing.T) {
	m := load(t)
	cfg := m.config(t)
	c := m.agent(t)
	pod := m.ds.Spec.Template.Spec

	// Every hostPath is mounted at its own path, so the paths the agent
	// hands out (a lease's file, the mount) mean the same files in a
	// trainer's pod that mounts the same hostPath.
	for _, vm := range c.VolumeMounts {
		if hp := m.volume(t, vm.Name).HostPath; hp != nil && path.Clean(hp.Path) != path.Clean(vm.MountPath) {
			t.Errorf("hostPath %s is mounted at %s", hp.Path, vm.MountPath)
		}
	}
	// The tiers, the control socket and the mount live on hostPaths: on
	// the node, shared with trainers and kept across restarts.
	for key, p := range map[string]string{"tiers.disk.dir": cfg.Tiers.Disk.Dir, "tiers.shm.dir": cfg.Tiers.Shm.Dir,
		"control.socket": cfg.Control.Socket, "mount.path": cfg.Mount.Path} {
		if p == "" {
			t.Errorf("%s is not set", key)
			continue
		}
		if v := m.volume(t, mountOf(t, c, p).Name); v.HostPath == nil {
			t.Errorf("%s %s is on volume %s, not a hostPath", key, p, v.Name)
		}
	}
	if !within(cfg.Tiers.Shm.Dir, "/dev/shm") {
		t.Errorf("tiers.shm.dir %s is not under /dev/shm", cfg.Tiers.Shm.Dir)
	}
	if cfg.Tiers.Shm.Max == 0 {
		t.Error("tiers.shm.max is 0 (a quarter of the node's /dev/shm): its pages count against the agent's memory; size it")
	}

	// FUSE: the mount is made strictly below a Bidirectional volume, so it
	// propagates to the node (a mount on the volume's own mountpoint would
	// cover it instead), and Bidirectional needs a privileged container.
	vm := mountOf(t, c, cfg.Mount.Path)
	if vm.MountPropagation == nil || *vm.MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("mount.path %s is on volume %s without mountPropagation: Bidirectional", cfg.Mount.Path, vm.Name)
	}
	if path.Clean(vm.MountPath) == path.Clean(cfg.Mount.Path) {
		t.Errorf("mount.path %s is the volume's mountpoint; put it below", cfg.Mount.Path)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Error("the container is not privileged: no FUSE mount, and Bidirectional propagation is refused")
	}
	// Only that volume propagates mounts to the node.
	for _, o := range c.VolumeMounts {
		if o.Name != vm.Name && o.MountPropagation != nil && *o.MountPropagation == corev1.MountPropagationBidirectional {
			t.Errorf("volume %s propagates mounts to the node too", o.Name)
		}
	}

	// No mount inside another: the runtime cannot create a mountpoint in a
	// read-only ConfigMap or Secret volume.
	for _, a := range c.VolumeMounts {
		for _, b := range c.VolumeMounts {
			if a.Name != b.Name && within(b.MountPath, a.MountPath) {
				t.Errorf("%s (%s) is mounted inside %s (%s)", b.Name, b.MountPath, a.Name, a.MountPath)
			}
		}
	}
	if len(pod.NodeSelector) == 0 {
		t.Error("no nodeSelector: the agents belong on the GPU nodes only")
	}
	u := m.ds.Spec.UpdateStrategy
	if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
		u.RollingUpdate.MaxSurge == nil || u.RollingUpdate.MaxSurge.IntValue() != 0 {
		t.Errorf("update strategy %+v: want a rolling update without surge (two agents cannot share a cache dir)", u)
	}
}

func TestNetworkPolicyLetsAgentsMeet(t *testing.T) {
	m := load(t)
	if m.np == nil {
		t.Skip("no NetworkPolicy")
	}
	pod := m.ds.Spec.Template.Labels
	matches := func(sel metav1.LabelSelector) bool {
		ls, err := metav1.LabelSelectorAsMap(&sel)
		if err != nil || len(sel.MatchExpressions) > 0 || len(ls) == 0 {
			return false
		}
		for k, v := range ls {
			if pod[k] != v {
				return false
			}
		}
		return true
	}
	if !matches(m.np.Spec.PodSelector) {
		t.Errorf("NetworkPolicy selects %+v, not the agents %v", m.np.Spec.PodSelector, pod)
	}
	// Which container ports each rule opens, and to whom.
	c := m.agent(t)
	fromAgents, fromAll := map[string]bool{}, map[string]bool{}
	for _, r := range m.np.Spec.Ingress {
		to := fromAll
		if len(r.From) > 0 {
			to = map[string]bool{}
			if len(r.From) == 1 && r.From[0].PodSelector != nil && r.From[0].NamespaceSelector == nil &&
				matches(*r.From[0].PodSelector) {
				to = fromAgents
			}
		}
		for _, p := range r.Ports {
			if p.Port == nil || p.Protocol == nil {
				t.Fatalf("NetworkPolicy port %+v: name the port and its protocol", p)
			}
			port(t, c, p.Port.String(), *p.Protocol) // names a container port with that protocol
			to[p.Port.String()+"/"+string(*p.Protocol)] = true
		}
	}
	for _, want := range []string{"gossip/TCP", "gossip-udp/UDP", "peer/TCP"} {
		if !fromAgents[want] {
			t.Errorf("NetworkPolicy does not let agents reach %s", want)
		}
		if fromAll[want] {
			t.Errorf("NetworkPolicy opens %s to every pod", want)
		}
	}
	if !fromAll["metrics/TCP"] {
		t.Error("NetworkPolicy closes the metrics port (Prometheus, probes)")
	}
}
