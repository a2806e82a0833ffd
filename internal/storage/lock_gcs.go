package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	gcstorage "cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
)

// An object-store lock is an object that exists only while it is held: it is created only if
// no object has its name (a generation precondition, the mutual exclusion object stores
// give), and deleted on release. Its holder refreshes it every lockRefresh; one that was not
// refreshed for lockStale was left by a process that died (no kernel lets it go) and is
// taken over, as is one whose holder, on this machine, is gone.
//
// A shared holder creates an object of its own beside the lock file's name
// (NAME.shared-ID). An exclusive holder creates NAME and then looks for shared objects; a
// shared holder creates its object and then looks for NAME. Whichever of two such objects
// was created later gives way (deletes its own); the earlier waits a moment for it to go.
var (
	lockRefresh = 20 * time.Second
	lockStale   = 2 * time.Minute
)

// lockMeta is what a lock object says about its holder.
const (
	metaHolder    = "dcl-holder"
	metaHost      = "dcl-host"
	metaPID       = "dcl-pid"
	metaToken     = "dcl-token"
	metaRefreshed = "dcl-refreshed"
)

func (d gcsDriver) tryLock(o *op, name string, exclusive bool, holder string) (func(), string, error) {
	token := randomID()
	host, _ := os.Hostname()
	meta := map[string]string{metaHolder: holder, metaHost: host, metaPID: strconv.Itoa(os.Getpid()), metaToken: token}
	own := name
	if !exclusive {
		own = name + sharedLockMarker + token
		meta[metaHolder] = ""
	}
	attrs, err := gcsCreateIfAbsent(o, own, meta)
	if err != nil {
		return nil, "", err
	}
	if attrs.Metadata[metaToken] != token { // held by another, alive
		return nil, attrs.Metadata[metaHolder], nil
	}
	// The other side: shared holders for an exclusive lock, the exclusive holder for a shared
	// one. A rival created first keeps the lock; one created after ours gives way once it
	// sees ours.
	rivals, err := gcsLockRivals(o, name, exclusive)
	if err != nil {
		gcsDeleteGeneration(o, own, attrs.Generation)
		return nil, "", err
	}
	for _, r := range rivals {
		if !r.Created.After(attrs.Created) || !gcsWaitGone(o, r) {
			gcsDeleteGeneration(o, own, attrs.Generation)
			return nil, r.Metadata[metaHolder], nil
		}
	}
	return d.holdLock(o.caller, own, attrs.Generation, meta), "", nil
}

// gcsCreateIfAbsent creates the lock object name with meta, unless an object of that name
// exists and is alive: it returns the attributes of the object that holds the name then,
// ours (meta's token) or the other holder's. A stale one is deleted and the creation tried
// again.
func gcsCreateIfAbsent(o *op, name string, meta map[string]string) (*gcstorage.ObjectAttrs, error) {
	obj, err := object(o, name)
	if err != nil {
		return nil, err
	}
	for range 10 {
		meta[metaRefreshed] = time.Now().UTC().Format(time.RFC3339Nano)
		w := obj.If(gcstorage.Conditions{DoesNotExist: true}).NewWriter(o.ctx)
		w.Metadata = meta
		w.ContentType = "text/plain"
		_, _ = w.Write([]byte(meta[metaHolder] + "\n"))
		err := w.Close()
		if err == nil {
			return w.Attrs(), nil
		}
		if !isPreconditionFailed(err) {
			return nil, err
		}
		// A retried creation whose first attempt succeeded finds its own object.
		attrs, err := obj.Attrs(o.ctx)
		if errors.Is(err, gcstorage.ErrObjectNotExist) {
			continue // let go meanwhile
		}
		if err != nil {
			return nil, err
		}
		if attrs.Metadata[metaToken] == meta[metaToken] || !lockIsStale(attrs) {
			return attrs, nil
		}
		slog.Warn("storage: taking over a lock whose holder is gone", "lock", "gs://"+attrs.Bucket+"/"+attrs.Name,
			"holder", attrs.Metadata[metaHolder], "refreshed", attrs.Metadata[metaRefreshed])
		gcsDeleteGeneration(o, name, attrs.Generation)
	}
	return nil, fmt.Errorf("the lock object kept changing hands while it was taken")
}

// gcsLockRivals returns the live objects that an exclusive (or shared) holder of name must
// not coexist with: the shared holders' (or the exclusive holder's). Stale ones are deleted.
func gcsLockRivals(o *op, name string, exclusive bool) ([]*gcstorage.ObjectAttrs, error) {
	var found []*gcstorage.ObjectAttrs
	if exclusive {
		b, prefix, err := bucket(o, name+sharedLockMarker)
		if err != nil {
			return nil, err
		}
		it := b.Objects(o.ctx, &gcstorage.Query{Prefix: prefix})
		for {
			attrs, err := it.Next()
			if errors.Is(err, iterator.Done) {
				break
			}
			if err != nil {
				return nil, err
			}
			found = append(found, attrs)
		}
	} else {
		obj, err := object(o, name)
		if err != nil {
			return nil, err
		}
		attrs, err := obj.Attrs(o.ctx)
		switch {
		case errors.Is(err, gcstorage.ErrObjectNotExist):
		case err != nil:
			return nil, err
		default:
			found = append(found, attrs)
		}
	}
	live := found[:0]
	for _, attrs := range found {
		if lockIsStale(attrs) {
			gcsDeleteGeneration(o, "gs://"+attrs.Bucket+"/"+attrs.Name, attrs.Generation)
			continue
		}
		live = append(live, attrs)
	}
	return live, nil
}

// gcsWaitGone waits a moment for a rival created after our object to give way, as it does
// when it finds ours, and reports whether it did.
func gcsWaitGone(o *op, r *gcstorage.ObjectAttrs) bool {
	obj, err := object(o, "gs://"+r.Bucket+"/"+r.Name)
	if err != nil {
		return false
	}
	for range 20 {
		_, err := obj.If(gcstorage.Conditions{GenerationMatch: r.Generation}).Attrs(o.ctx)
		if errors.Is(err, gcstorage.ErrObjectNotExist) {
			return true
		}
		select {
		case <-o.ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

// holdLock refreshes the lock object own until it is released, and returns its release.
func (d gcsDriver) holdLock(ctx context.Context, own string, generation int64, meta map[string]string) func() {
	ctx = context.WithoutCancel(ctx)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(lockRefresh)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			_, err := run(ctx, "refreshing the lock", own, func(_ driver, o *op) (struct{}, error) {
				obj, err := object(o, own)
				if err != nil {
					return struct{}{}, err
				}
				_, err = obj.If(gcstorage.Conditions{GenerationMatch: generation}).Update(o.ctx,
					gcstorage.ObjectAttrsToUpdate{Metadata: map[string]string{metaRefreshed: time.Now().UTC().Format(time.RFC3339Nano)}})
				return struct{}{}, err
			})
			if err != nil {
				slog.Warn("storage: the lock could not be refreshed; another writer may take it over", "lock", own, "err", err)
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
		_, _ = run(ctx, "releasing the lock", own, func(_ driver, o *op) (struct{}, error) {
			gcsDeleteGeneration(o, own, generation)
			return struct{}{}, nil
		})
	}
}

// gcsDeleteGeneration deletes the object name if it is still the given generation (not a
// new holder's). It is best effort: a lock object left behind goes stale.
func gcsDeleteGeneration(o *op, name string, generation int64) {
	obj, err := object(o, name)
	if err != nil {
		return
	}
	err = obj.If(gcstorage.Conditions{GenerationMatch: generation}).Delete(o.ctx)
	if err != nil && !errors.Is(err, gcstorage.ErrObjectNotExist) && !isPreconditionFailed(err) {
		slog.Warn("storage: a lock object could not be removed; it goes stale", "lock", name, "err", err)
	}
}

// lockIsStale reports whether a lock object's holder is gone: not refreshed for lockStale,
// or written by a process of this machine that no longer runs.
func lockIsStale(attrs *gcstorage.ObjectAttrs) bool {
	refreshed, err := time.Parse(time.RFC3339Nano, attrs.Metadata[metaRefreshed])
	if err != nil {
		refreshed = attrs.Updated
	}
	if time.Since(refreshed) > lockStale {
		return true
	}
	host, _ := os.Hostname()
	pid, err := strconv.Atoi(attrs.Metadata[metaPID])
	return err == nil && host != "" && attrs.Metadata[metaHost] == host && !processAlive(pid)
}

func isPreconditionFailed(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusPreconditionFailed
}

// randomID is sharedIDLen random hexadecimal digits.
func randomID() string {
	b := make([]byte, sharedIDLen/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
