// Package snapshot keeps an informer's cache on disk: its objects, already
// encoded by the caller, and the resourceVersion they are at, in one
// go.etcd.io/bbolt file.
//
// Every Commit is one bbolt transaction, so a process killed at any moment
// leaves the previous or the next committed state, never a mix. Load checks
// what bbolt cannot: that the file is a snapshot of this format and of the
// watch it is asked for (its identity), and that its entries are the ones
// written (a checksum over all of them, kept up to date by each Commit). A
// damaged file (bbolt panics on some, and faults on a truncated mapping) is
// an error from Open or Load, never a crash.
package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Format is the version of the file's layout. A file of another version is
// foreign, but for formerFormat, which Load reads as it is (the layout
// only gained keyDicts), and the next Commit marks Format.
const Format = 3

// formerFormat is the layout before keyDicts.
const formerFormat = 2

var (
	bucketMeta    = []byte("meta")
	bucketObjects = []byte("objects")

	keyFormat   = []byte("format")
	keyIdentity = []byte("identity")
	keyRV       = []byte("resourceVersion")
	keySum      = []byte("sum")   // 8 bytes: XOR of the entries' CRC-64s
	keyCount    = []byte("count") // 8 bytes: the number of entries
	keyCluster  = []byte("cluster")
	// keyDicts holds what the caller keeps beside the objects to decode
	// them (the dictionaries their entries are compressed against),
	// opaque here.
	keyDicts = []byte("dicts")
)

// ErrInUse: another process (or another informer in this one) holds the
// file.
var ErrInUse = errors.New("the snapshot file is in use by another informer")

// Store is an open snapshot file. Its methods are not safe for concurrent
// use.
type Store struct {
	db       *bolt.DB
	identity string
}

// Options configure Open.
type Options struct {
	// NoSync skips the fsync after each commit. A killed process still
	// leaves a consistent file (the writes are in the kernel's cache); an
	// operating-system crash or power loss may lose the last commits or
	// damage the file, which Load then reports.
	NoSync bool
	// LockTimeout is how long Open waits for another holder of the file to
	// let go before returning ErrInUse. Default one second.
	LockTimeout time.Duration
}

// Open opens the snapshot file at path, creating it (and an empty snapshot
// for identity) if it does not exist. An existing file that is not a
// readable bbolt file is an error; its content is checked by Load. A file
// that is not private (OpenPrivate) is an error wrapping ErrUnsafe, and
// is neither read nor changed.
func Open(path, identity string, o Options) (s *Store, err error) {
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	db, err := openBolt(path, bolt.Options{Timeout: o.LockTimeout, NoSync: o.NoSync, InitialMmapSize: 1 << 30})
	if err != nil {
		return nil, err
	}
	s = &Store{db: db, identity: identity}
	var exists bool
	err = guard(func() error {
		// Not in Update: an update that changes nothing still writes a
		// meta page, and opening a file must not change it (a client
		// the server then refuses leaves it as it was).
		return db.View(func(tx *bolt.Tx) error {
			exists = tx.Bucket(bucketMeta) != nil // an existing snapshot: Load checks it
			return nil
		})
	})
	if err == nil && !exists {
		err = guard(func() error { return s.create() })
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// create makes an empty snapshot in a new file.
func (s *Store) create() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketObjects); err != nil {
			return err
		}
		for k, v := range map[string][]byte{
			string(keyFormat):   []byte(strconv.Itoa(Format)),
			string(keyIdentity): []byte(s.identity),
			string(keyRV):       nil,
			string(keySum):      make([]byte, 8),
			string(keyCount):    make([]byte, 8),
		} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// Close closes the file.
func (s *Store) Close() error {
	var err error
	if gerr := guard(func() error { err = s.db.Close(); return nil }); gerr != nil {
		return gerr
	}
	return err
}

// Load checks the snapshot and calls fn with each entry, in key order; the
// slices are valid only during the call. It returns the snapshot's
// resourceVersion: "" for a snapshot that holds no usable state (never
// committed to, or reset), and then fn is not called.
// An error from fn ends the load and is returned.
func (s *Store) Load(fn func(key, value []byte) error) (rv string, err error) {
	err = guard(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			objects := tx.Bucket(bucketObjects)
			if meta == nil || objects == nil {
				return errors.New("not a kinformer snapshot (no meta bucket)")
			}
			if f := string(meta.Get(keyFormat)); f != strconv.Itoa(Format) && f != strconv.Itoa(formerFormat) {
				return fmt.Errorf("format %q, want %d", f, Format)
			}
			if id := meta.Get(keyIdentity); !bytes.Equal(id, []byte(s.identity)) {
				return fmt.Errorf("a snapshot of another watch (%s)", firstDifference(string(id), s.identity))
			}
			// A file cut short: bbolt would fault on the missing pages.
			// (Not tx.Check: it reads on a goroutine of its own, where a
			// fault could not be recovered.)
			if fi, err := os.Lstat(s.db.Path()); err != nil {
				return err
			} else if fi.Size() < tx.Size() {
				return fmt.Errorf("truncated: %d bytes, the file's pages need %d", fi.Size(), tx.Size())
			}
			rv = string(meta.Get(keyRV))
			wantSum, wantCount := meta.Get(keySum), meta.Get(keyCount)
			if len(wantSum) != 8 || len(wantCount) != 8 {
				return errors.New("checksum or count missing")
			}
			var sum, n uint64
			// The sum cannot see a damaged key in a branch page: ForEach
			// does not read those keys, but every Get, Put and Delete of a
			// later Commit does, and would miss keys, leaving deleted
			// objects behind or an object twice, with a right sum. So each
			// key must come in order and be found from the root.
			var last []byte
			seek := objects.Cursor()
			err := objects.ForEach(func(k, v []byte) error {
				if v == nil {
					return fmt.Errorf("a nested bucket %q", k)
				}
				if n > 0 && bytes.Compare(last, k) >= 0 {
					return fmt.Errorf("key %q after %q: out of order", k, last)
				}
				if found, _ := seek.Seek(k); !bytes.Equal(found, k) {
					return fmt.Errorf("key %q not found from the root: a damaged branch page", k)
				}
				last = k
				sum ^= entrySum(k, v)
				n++
				if rv == "" {
					return nil
				}
				return fn(k, v)
			})
			if err != nil {
				return err
			}
			if c := binary.BigEndian.Uint64(wantCount); c != n {
				return fmt.Errorf("%d objects, the snapshot says %d", n, c)
			}
			if sum != binary.BigEndian.Uint64(wantSum) {
				return errors.New("checksum mismatch: the objects are not those written")
			}
			return nil
		})
	})
	return rv, err
}

// openBolt opens the file at path as Open and Identity do: an existing
// file is verified first (verifyLocked), then bbolt opens it with o,
// through OpenPrivate (never a file that is not private), waiting up to
// o.Timeout for another holder to let go (ErrInUse if it does not); a
// panic of bbolt on a damaged file is an error.
func openBolt(path string, o bolt.Options) (*bolt.DB, error) {
	if err := verifyLocked(path, o.Timeout); err != nil {
		return nil, err
	}
	var db *bolt.DB
	var f *os.File
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		var err error
		f, err = OpenPrivate(name, flag, perm)
		return f, err
	}
	err := guard(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &o)
		return err
	})
	if db == nil && f != nil {
		// bolt.Open panicked on a damaged file (it closes the file itself
		// on an error it returns): close it, else each damaged file opened
		// costs a descriptor for the life of the process. Its mapping, out
		// of reach, still leaks, and keeps the file locked: a later Open
		// of the same file in this process is ErrInUse (the caller sets a
		// damaged file aside and creates a new one).
		f.Close()
	}
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, ErrInUse
	}
	if err != nil {
		return nil, err
	}
	return db, nil
}

// verifyLocked verifies an existing file (verify.go) under bbolt's lock,
// so as not to read a file another informer is writing; ErrInUse if it
// does not let go within timeout.
func verifyLocked(path string, timeout time.Duration) error {
	f, err := OpenPrivate(path, os.O_RDONLY, 0)
	if os.IsNotExist(err) {
		return nil // bbolt creates it
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.Size() == 0 {
		return errors.New("the file is empty")
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		ok, err := tryLock(f)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return ErrInUse
		}
	}
	return verify(path)
}

// ResourceVersion returns the snapshot's resourceVersion, unchecked.
func (s *Store) ResourceVersion() (string, error) { return s.meta(keyRV) }

// Cluster returns the cluster the snapshot was written from (see
// Batch.Cluster), unchecked; "" if none was recorded.
func (s *Store) Cluster() (string, error) { return s.meta(keyCluster) }

// Dicts returns what the last Batch with Dicts set there (a copy),
// unchecked; nil if none did.
func (s *Store) Dicts() ([]byte, error) {
	v, err := s.meta(keyDicts)
	if v == "" {
		return nil, err
	}
	return []byte(v), err
}

// meta returns the value of key in the meta bucket, unchecked; "" if
// there is none.
func (s *Store) meta(key []byte) (v string, err error) {
	err = guard(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			if meta := tx.Bucket(bucketMeta); meta != nil {
				v = string(meta.Get(key))
			}
			return nil
		})
	})
	return v, err
}

// Batch is one atomic change to a snapshot.
type Batch struct {
	Reset bool              // remove every object first
	Puts  map[string][]byte // key → encoded object
	Dels  []string
	RV    string // the resourceVersion the snapshot is at after the batch
	// Cluster, if set, says which cluster the objects come from (the
	// caller's fingerprint of it): a later run from another cluster must
	// not use them.
	Cluster string
	// Dicts, if not nil, replaces what the file keeps beside the objects
	// to decode them (Store.Dicts). A Reset leaves it.
	Dicts []byte
}

// Commit applies b in one transaction.
func (s *Store) Commit(b *Batch) error {
	return guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			objects := tx.Bucket(bucketObjects)
			if meta == nil || objects == nil {
				return errors.New("not a kinformer snapshot (no meta bucket)")
			}
			sumB, countB := meta.Get(keySum), meta.Get(keyCount)
			if len(sumB) != 8 || len(countB) != 8 {
				return errors.New("checksum or count missing")
			}
			sum, n := binary.BigEndian.Uint64(sumB), binary.BigEndian.Uint64(countB)
			if b.Reset {
				if err := tx.DeleteBucket(bucketObjects); err != nil {
					return err
				}
				var err error
				if objects, err = tx.CreateBucket(bucketObjects); err != nil {
					return err
				}
				sum, n = 0, 0
			}
			for _, k := range b.Dels {
				if old := objects.Get([]byte(k)); old != nil {
					sum ^= entrySum([]byte(k), old)
					n--
					if err := objects.Delete([]byte(k)); err != nil {
						return err
					}
				}
			}
			// In key order: bbolt inserts into sorted nodes, and a full
			// first commit in random order moves them about for each key.
			for _, k := range slices.Sorted(maps.Keys(b.Puts)) {
				v := b.Puts[k]
				if old := objects.Get([]byte(k)); old != nil {
					sum ^= entrySum([]byte(k), old)
				} else {
					n++
				}
				sum ^= entrySum([]byte(k), v)
				if err := objects.Put([]byte(k), v); err != nil {
					return err
				}
			}
			var buf [16]byte
			binary.BigEndian.PutUint64(buf[:8], sum)
			binary.BigEndian.PutUint64(buf[8:], n)
			if err := meta.Put(keySum, buf[:8]); err != nil {
				return err
			}
			if err := meta.Put(keyCount, buf[8:]); err != nil {
				return err
			}
			if b.Cluster != "" {
				if err := meta.Put(keyCluster, []byte(b.Cluster)); err != nil {
					return err
				}
			}
			if b.Dicts != nil {
				if err := meta.Put(keyDicts, b.Dicts); err != nil {
					return err
				}
			}
			if err := meta.Put(keyFormat, []byte(strconv.Itoa(Format))); err != nil {
				return err
			}
			return meta.Put(keyRV, []byte(b.RV))
		})
	})
}

// firstDifference names the first line where identities differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("%q where this informer has %q", trim(gl), trim(wl))
		}
	}
	return "identical lines"
}

func trim(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entrySum is an entry's contribution to the snapshot's checksum: two
// CRC-32s (Castagnoli and IEEE, both computed in hardware on common
// CPUs) of its key's length, key and value.
func entrySum(k, v []byte) uint64 {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(k)))
	c := crc32.Update(0, castagnoli, n[:])
	c = crc32.Update(c, castagnoli, k)
	c = crc32.Update(c, castagnoli, v)
	i := crc32.Update(0, crc32.IEEETable, n[:])
	i = crc32.Update(i, crc32.IEEETable, k)
	i = crc32.Update(i, crc32.IEEETable, v)
	return uint64(c)<<32 | uint64(i)
}

// guard runs fn, turning a panic, or a memory fault on a mapped file that
// is shorter than it claims, into an error: bbolt trusts its file.
func guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the file is damaged: %v", r)
		}
	}()
	return fn()
}

// Identity returns the identity a snapshot file was made for, checked as
// Open checks a file and without changing it; ErrInUse if another holds
// it (which means it is used), ErrUnsafe if it is not private.
func Identity(path string, timeout time.Duration) (id string, err error) {
	db, err := openBolt(path, bolt.Options{Timeout: timeout, ReadOnly: true})
	if err != nil {
		return "", err
	}
	defer db.Close()
	err = guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			if meta == nil {
				return errors.New("not a kinformer snapshot (no meta bucket)")
			}
			id = string(meta.Get(keyIdentity))
			return nil
		})
	})
	return id, err
}
