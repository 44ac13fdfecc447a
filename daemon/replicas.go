package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/checkpoint"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/fleet/peer"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// replicasPath is the peer port's route for checkpoint replicas, beside
// peer.Path; its requests are signed like the data plane's.
const replicasPath = "/v1/replicas/"

// holdersPath is the peer port's route where a member tells the others
// which member holds a checkpoint's files (ckptFleet.Prefer).
const holdersPath = "/v1/holders"

// maxReplicaManifest bounds the manifest a replica begins with.
const maxReplicaManifest = 16 << 20

// replicaTimeout bounds one replica request without a body; a file's
// transfer is bounded by the store's context instead (it may be large).
const replicaTimeout = 30 * time.Second

// ckptFleet is checkpoint.Fleet over the daemon's fleet and its peer
// plane: replicas travel to members' peer ports, signed with the data
// plane's key (and under its TLS, when on).
type ckptFleet struct {
	f      atomic.Pointer[fleet.Fleet] // nil until the fleet starts
	p      *peerPlane
	log    *slog.Logger
	client *http.Client
	scheme string
}

// newCkptFleet returns the checkpoint store's view of the fleet of p; the
// fleet itself is set once started.
func newCkptFleet(p *peerPlane, log *slog.Logger) *ckptFleet {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	c := &ckptFleet{p: p, log: log, scheme: "http", client: &http.Client{Transport: tr}}
	if p.tls != nil {
		tr.TLSClientConfig, c.scheme = p.tls.Client, "https"
	}
	return c
}

// Pick returns up to n live members other than this agent, ranked for key.
func (c *ckptFleet) Pick(key string, n int) []string {
	f := c.f.Load()
	if f == nil {
		return nil
	}
	var out []string
	for _, m := range f.Owners(placement.Key{Object: key}, n+1) {
		if m.Name != f.Name() && len(out) < n {
			out = append(out, m.Name)
		}
	}
	return out
}

// Dead reports whether member is out of the fleet. Until this agent has
// joined, no one is: a replica's holder that restarts does not take over
// saves whose saver it has not yet seen.
func (c *ckptFleet) Dead(member string) bool {
	f := c.f.Load()
	if f == nil {
		return false
	}
	select {
	case <-f.Joined():
	default:
		return false
	}
	_, ok := f.Member(member)
	return !ok
}

// Do sends one signed replica request to member's peer port.
func (c *ckptFleet) Do(ctx context.Context, member, method, path string, body io.Reader, size int64) error {
	f := c.f.Load()
	if f == nil {
		return errors.New("not in a fleet yet")
	}
	m, ok := f.Member(member)
	if !ok {
		return fmt.Errorf("%s is not a live member", member)
	}
	if body == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, replicaTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+m.PeerAddr+path, body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	if err := peer.Sign(c.p.key, req); err != nil {
		return err
	}
	res, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		return fmt.Errorf("%s %s: %s: %s", method, path, res.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Prefer has the objects under prefix filled from member (see
// fleetOwners.Owners), here and on every other live member: an owner may
// fill for another member's restore before its own restore begins. Only
// this node's peer port starts serving prefix's bucket: the others serve
// theirs (their sources and checkpoints), which a member cannot widen.
func (c *ckptFleet) Prefer(ctx context.Context, prefix object.URI, member string) {
	c.p.owners.prefer(prefix, member)
	c.p.srv.AllowBucket(prefix.Bucket)
	f := c.f.Load()
	if f == nil {
		return
	}
	q := url.Values{"uri": {prefix.String()}, "node": {member}}
	var wg sync.WaitGroup
	for _, m := range f.Members() {
		if m.Name == f.Name() || m.State == fleet.StateDead {
			continue
		}
		wg.Go(func() {
			if err := c.Do(ctx, m.Name, http.MethodPost, holdersPath+"?"+q.Encode(), nil, 0); err != nil {
				c.log.Debug("checkpoint: tell a member who holds a checkpoint", "member", m.Name, "err", err)
			}
		})
	}
	wg.Wait()
}

// close releases the client's idle connections.
func (c *ckptFleet) close() { c.client.CloseIdleConnections() }

// replicaHandler serves the replica routes of the peer port for store:
//
//	PUT    /v1/replicas/{save}            begin, the manifest to be as the body
//	PUT    /v1/replicas/{save}/{i}        file i's bytes
//	POST   /v1/replicas/{save}/complete   ?holders=a,b: every file is here
//	DELETE /v1/replicas/{save}            the save is committed: drop it
func replicaHandler(store *checkpoint.Store) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+replicasPath+"{save}", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxReplicaManifest+1))
		if err == nil && len(b) > maxReplicaManifest {
			err = fmt.Errorf("%w: larger than %d bytes", checkpoint.ErrManifest, maxReplicaManifest)
		}
		if err == nil {
			err = store.ReplicaBegin(r.Context(), r.PathValue("save"), b)
		}
		replied(w, err)
	})
	mux.HandleFunc("PUT "+replicasPath+"{save}/{i}", func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.PathValue("i"))
		if err != nil {
			replied(w, fmt.Errorf("%w: file %q", checkpoint.ErrManifest, r.PathValue("i")))
			return
		}
		replied(w, store.ReplicaFile(r.PathValue("save"), i, r.Body))
	})
	mux.HandleFunc("POST "+replicasPath+"{save}/complete", func(w http.ResponseWriter, r *http.Request) {
		holders := strings.Split(r.URL.Query().Get("holders"), ",")
		replied(w, store.ReplicaComplete(r.PathValue("save"), slices.DeleteFunc(holders, func(h string) bool { return h == "" })))
	})
	mux.HandleFunc("DELETE "+replicasPath+"{save}", func(w http.ResponseWriter, r *http.Request) {
		replied(w, store.ReplicaDrop(r.PathValue("save")))
	})
	return mux
}

// replied answers a replica request: 204, or err's status and text.
func replied(w http.ResponseWriter, err error) {
	if err == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	_, status := codeOf(err)
	http.Error(w, err.Error(), status)
}

// peerHandler routes the peer port: replicas (when the store takes them)
// and holders behind the data plane's authentication, the rest to the
// object server.
func peerHandler(p *peerPlane, store *checkpoint.Store) (http.Handler, error) {
	if store == nil {
		return p.srv, nil
	}
	mux := http.NewServeMux()
	mux.Handle(replicasPath, replicaHandler(store))
	mux.HandleFunc("POST "+holdersPath, func(w http.ResponseWriter, r *http.Request) {
		u, err := object.ParsePrefix(r.URL.Query().Get("uri"))
		node := r.URL.Query().Get("node")
		if err == nil && (node == "" || len(node) > 256) {
			err = fmt.Errorf("node %q", node)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// The bucket list is this node's own (its sources, the buckets
		// its checkpoints are in): a member cannot widen it.
		p.owners.prefer(u, node)
		w.WriteHeader(http.StatusNoContent)
	})
	authed, err := peer.Authenticated(p.key, mux)
	if err != nil {
		return nil, fmt.Errorf("daemon: fleet: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, replicasPath) || r.URL.Path == holdersPath {
			authed.ServeHTTP(w, r)
			return
		}
		p.srv.ServeHTTP(w, r)
	}), nil
}

// maxPreferred bounds fleetOwners' preferred holders: those of the
// checkpoints most recently restored.
const maxPreferred = 64

// preferred is the member that the owners of one checkpoint's objects
// fill them from: the agent that saved it holds its files.
type preferred struct {
	bucket, prefix, member string
}

// prefer has the owners of the objects under u fill them from member, for
// as long as it is live.
func (o *fleetOwners) prefer(u object.URI, member string) {
	o.prefMu.Lock()
	defer o.prefMu.Unlock()
	var list []preferred
	if old := o.pref.Load(); old != nil {
		list = slices.DeleteFunc(slices.Clone(*old), func(p preferred) bool {
			return p.bucket == u.Bucket && p.prefix == u.Path
		})
	}
	list = append(list, preferred{u.Bucket, u.Path, member})
	if len(list) > maxPreferred {
		list = list[len(list)-maxPreferred:]
	}
	o.pref.Store(&list)
}

// preferredFor returns the member preferred for key, if any.
func (o *fleetOwners) preferredFor(key placement.Key) (string, bool) {
	list := o.pref.Load()
	if list == nil {
		return "", false
	}
	for _, p := range *list {
		if p.bucket == key.Bucket && strings.HasPrefix(key.Object, p.prefix) {
			return p.member, true
		}
	}
	return "", false
}
