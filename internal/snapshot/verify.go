package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// bbolt reads its file through a memory map and trusts every page id it
// finds there: a damaged page can send it reading outside the map (a
// fault, or another part of the process's memory), or round a loop of
// pages forever. So before bbolt opens a file, verify walks its structure
// with plain reads and checks what bbolt would follow: the meta page bbolt
// would choose, every page reachable from it (in bounds, of the right
// type, its elements inside it, each page reached once), and the freelist
// (in bounds, and no page both free and in use). What the pages hold is
// checked after, by Load's checksum.
//
// The layout is bbolt's on-disk format (version 2), as in its
// internal/common package: a 16-byte page header {id u64, flags u16,
// count u16, overflow u32}; branch elements {pos u32, ksize u32, pgid u64};
// leaf elements {flags u32, pos u32, ksize u32, vsize u32}, pos counted from
// the element; a bucket's value {root pgid u64, sequence u64}, followed by
// an inline page when root is 0; the meta {magic, version, pageSize, flags
// u32; root bucket; freelist, pgid (the high-water mark), txid u64;
// checksum u64, FNV-64a of what precedes it}. Integers are in the
// machine's byte order.

const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16
	elementSize      = 16
	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	freelistPageFlag = 0x10
	bucketLeafFlag   = 0x01
	noFreelist       = ^uint64(0)
	maxDepth         = 64
)

var order = binary.NativeEndian

type boltMeta struct {
	pageSize       uint64
	root, freelist uint64
	hwm, txid      uint64
}

// readMeta reads and checks the meta page at off.
func readMeta(f io.ReaderAt, off int64) (boltMeta, error) {
	var b [pageHeaderSize + 64]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return boltMeta{}, err
	}
	m := b[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(m[:56])
	switch {
	case order.Uint32(m[0:]) != boltMagic:
		return boltMeta{}, errors.New("not a bbolt file")
	case order.Uint32(m[4:]) != boltVersion:
		return boltMeta{}, fmt.Errorf("bbolt format version %d", order.Uint32(m[4:]))
	case order.Uint64(m[56:]) != h.Sum64():
		return boltMeta{}, errors.New("meta page checksum mismatch")
	}
	meta := boltMeta{
		pageSize: uint64(order.Uint32(m[8:])),
		root:     order.Uint64(m[16:]),
		freelist: order.Uint64(m[32:]),
		hwm:      order.Uint64(m[40:]),
		txid:     order.Uint64(m[48:]),
	}
	if meta.pageSize < 512 || meta.pageSize > 1<<20 || meta.pageSize&(meta.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("page size %d", meta.pageSize)
	}
	return meta, nil
}

// verify checks the bbolt structure of the file at path, as described
// above.
func verify(path string) error {
	f, err := OpenPrivate(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	// bbolt finds the page size in the first meta page, or if that is
	// damaged, tries the second at the usual page sizes.
	m0, err0 := readMeta(f, 0)
	var m1 boltMeta
	var err1 error = errors.New("no second meta page")
	if err0 == nil {
		m1, err1 = readMeta(f, int64(m0.pageSize))
	} else {
		for _, ps := range []int64{4096, 8192, 16384, 32768, 65536} {
			if m1, err1 = readMeta(f, ps); err1 == nil && int64(m1.pageSize) == ps {
				break
			}
		}
	}
	// bbolt uses the valid meta with the higher transaction id.
	var m boltMeta
	switch {
	case err0 == nil && (err1 != nil || m0.txid >= m1.txid):
		m = m0
	case err1 == nil:
		m = m1
	default:
		return fmt.Errorf("no valid meta page: %v", err0)
	}
	if m.hwm < 2 || m.hwm > uint64(fi.Size())/m.pageSize {
		return fmt.Errorf("the file has %d bytes, its pages need %d", fi.Size(), m.hwm*m.pageSize)
	}
	w := &walker{f: f, pageSize: m.pageSize, hwm: m.hwm, seen: map[uint64]bool{0: true, 1: true}}
	if m.root < 2 || m.root >= m.hwm {
		return fmt.Errorf("root page %d out of bounds", m.root)
	}
	if err := w.tree(m.root, 0); err != nil {
		return err
	}
	if m.freelist != noFreelist {
		if err := w.freelistPage(m.freelist); err != nil {
			return err
		}
	}
	return nil
}

type walker struct {
	f        io.ReaderAt
	pageSize uint64
	hwm      uint64
	seen     map[uint64]bool // pages reached, overflow pages included
	bufs     [][]byte        // a page buffer per depth
}

// page reads page id and its overflow pages, once, into the buffer of
// depth (a page's buffer is in use while the pages under it are read).
func (w *walker) page(id uint64, depth int) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page %d out of bounds (high-water mark %d)", id, w.hwm)
	}
	for len(w.bufs) <= depth {
		w.bufs = append(w.bufs, make([]byte, w.pageSize))
	}
	buf := w.bufs[depth][:w.pageSize]
	if _, err := w.f.ReadAt(buf, int64(id*w.pageSize)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := order.Uint64(buf[0:]); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	overflow := uint64(order.Uint32(buf[12:]))
	if overflow >= w.hwm-id {
		return nil, fmt.Errorf("page %d: %d overflow pages past the high-water mark", id, overflow)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("page %d reached twice", i)
		}
		w.seen[i] = true
	}
	if overflow > 0 {
		if uint64(cap(w.bufs[depth])) < (1+overflow)*w.pageSize {
			w.bufs[depth] = make([]byte, (1+overflow)*w.pageSize)
		}
		buf = w.bufs[depth][:(1+overflow)*w.pageSize]
		if _, err := w.f.ReadAt(buf[w.pageSize:], int64((id+1)*w.pageSize)); err != nil {
			return nil, fmt.Errorf("page %d: %w", id, err)
		}
	}
	return buf, nil
}

// tree checks the branch or leaf page id and the pages under it.
func (w *walker) tree(id uint64, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("page %d: deeper than %d levels", id, maxDepth)
	}
	p, err := w.page(id, depth)
	if err != nil {
		return err
	}
	return w.node(p, id, depth)
}

func (w *walker) node(p []byte, id uint64, depth int) error {
	if len(p) < pageHeaderSize {
		return fmt.Errorf("page %d: short", id)
	}
	flags, count := order.Uint16(p[8:]), uint64(order.Uint16(p[10:]))
	if pageHeaderSize+count*elementSize > uint64(len(p)) {
		return fmt.Errorf("page %d: %d elements do not fit", id, count)
	}
	for i := range count {
		off := pageHeaderSize + i*elementSize
		e := p[off : off+elementSize]
		switch flags {
		case branchPageFlag:
			pos, ksize := uint64(order.Uint32(e[0:])), uint64(order.Uint32(e[4:]))
			if off+pos+ksize > uint64(len(p)) {
				return fmt.Errorf("page %d: element %d outside the page", id, i)
			}
			if err := w.tree(order.Uint64(e[8:]), depth+1); err != nil {
				return err
			}
		case leafPageFlag:
			eflags, pos := order.Uint32(e[0:]), uint64(order.Uint32(e[4:]))
			ksize, vsize := uint64(order.Uint32(e[8:])), uint64(order.Uint32(e[12:]))
			if off+pos+ksize+vsize > uint64(len(p)) {
				return fmt.Errorf("page %d: element %d outside the page", id, i)
			}
			if eflags&bucketLeafFlag == 0 {
				continue
			}
			v := p[off+pos+ksize : off+pos+ksize+vsize]
			if len(v) < 16 {
				return fmt.Errorf("page %d: element %d: a bucket of %d bytes", id, i, len(v))
			}
			if depth > maxDepth {
				return fmt.Errorf("page %d: deeper than %d levels", id, maxDepth)
			}
			if root := order.Uint64(v); root != 0 {
				if err := w.tree(root, depth+1); err != nil {
					return err
				}
			} else if err := w.node(v[16:], id, depth+1); err != nil { // an inline bucket
				return err
			}
		default:
			return fmt.Errorf("page %d: type %#x where a branch or leaf belongs", id, flags)
		}
	}
	return nil
}

// freelistPage checks the freelist: in bounds, and no free page in use.
func (w *walker) freelistPage(id uint64) error {
	p, err := w.page(id, 0)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if order.Uint16(p[8:]) != freelistPageFlag {
		return fmt.Errorf("freelist page %d is of type %#x", id, order.Uint16(p[8:]))
	}
	n, start := uint64(order.Uint16(p[10:])), uint64(pageHeaderSize)
	if n == 0xFFFF { // the real count is the first element
		if len(p) < pageHeaderSize+8 {
			return fmt.Errorf("freelist page %d: short", id)
		}
		n, start = order.Uint64(p[pageHeaderSize:]), pageHeaderSize+8
	}
	if n > (uint64(len(p))-start)/8 {
		return fmt.Errorf("freelist page %d: %d ids do not fit", id, n)
	}
	for i := range n {
		free := order.Uint64(p[start+8*i:])
		if free < 2 || free >= w.hwm {
			return fmt.Errorf("freelist: page %d out of bounds", free)
		}
		if w.seen[free] {
			return fmt.Errorf("freelist: page %d is free and in use", free)
		}
	}
	return nil
}
