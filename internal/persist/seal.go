package persist

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kinformer/kinformer/internal/snapshot"
)

// KeySize is the size of a state file key: AES-256.
const KeySize = 32

// sealVersion is the first byte of a sealed value: the layout below.
const sealVersion = 0xE1

// A sealed value is sealVersion, the key's id (the first 4 bytes of its
// SHA-256), a 12-byte random nonce, then the object's bytes encrypted with
// AES-256-GCM and its 16-byte tag. The additional data is the file's
// identity as sealed (Identity.Sealed) and the entry's key: a value moved
// to another entry, or into another file, does not open.
const (
	keyIDSize = 4
	nonceSize = 12
	sealedMin = 1 + keyIDSize + nonceSize + 16
)

// sealer encrypts a state file's values with the first of its keys and
// decrypts them with any.
type sealer struct {
	ids   [][keyIDSize]byte
	aeads []cipher.AEAD
}

func newSealer(keys [][]byte) (*sealer, error) {
	s := &sealer{}
	for i, k := range keys {
		if len(k) != KeySize {
			return nil, fmt.Errorf("state key %d: %d bytes, want %d", i+1, len(k), KeySize)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(k)
		s.ids = append(s.ids, [keyIDSize]byte(sum[:keyIDSize]))
		s.aeads = append(s.aeads, aead)
	}
	if len(s.aeads) == 0 {
		return nil, errors.New("no state key")
	}
	return s, nil
}

func additional(identity, key string) []byte {
	return fmt.Appendf(nil, "%d:%s;%s", len(identity), identity, key)
}

// seal encrypts v, the value of entry key in the file of identity, with
// the first key.
func (s *sealer) seal(identity, key string, v []byte) ([]byte, error) {
	out := make([]byte, 1+keyIDSize+nonceSize, sealedMin+len(v))
	out[0] = sealVersion
	copy(out[1:], s.ids[0][:])
	nonce := out[1+keyIDSize:]
	if _, err := io.ReadFull(rand.Reader, nonce); err != nil {
		return nil, err
	}
	return s.aeads[0].Seal(out, nonce, v, additional(identity, key)), nil
}

// open decrypts a value seal made; old says it was sealed with a key
// other than the first (the file should be sealed again).
func (s *sealer) open(identity, key string, v []byte) (plain []byte, old bool, err error) {
	if len(v) < sealedMin || v[0] != sealVersion {
		return nil, false, errors.New("not encrypted with a state key")
	}
	id := [keyIDSize]byte(v[1 : 1+keyIDSize])
	nonce := v[1+keyIDSize : 1+keyIDSize+nonceSize]
	var failed error
	for i, kid := range s.ids {
		if kid != id {
			continue
		}
		// Every key with that id: ids are 4 bytes of a digest, and two
		// keys given may share one.
		plain, err := s.aeads[i].Open(nil, nonce, v[1+keyIDSize+nonceSize:], additional(identity, key))
		if err == nil {
			return plain, i > 0, nil
		}
		failed = fmt.Errorf("does not decrypt with the state key of id %x: %w", id, err)
	}
	if failed != nil {
		return nil, false, failed
	}
	return nil, false, fmt.Errorf("encrypted with a state key not given (id %x)", id)
}

// ParseKeys reads state keys from text: one per line (or separated by
// commas), each 32 bytes in standard base64 (as `head -c 32 /dev/urandom |
// base64` prints), the first to encrypt with. Empty lines and lines
// starting with # are skipped.
func ParseKeys(text string) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ',' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("state key %d: not base64: %w", i+1, err)
		}
		if len(k) != KeySize {
			return nil, fmt.Errorf("state key %d: %d bytes, want %d", i+1, len(k), KeySize)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no state key")
	}
	return keys, nil
}

// ReadKeys reads state keys from a file (ParseKeys), which must be a
// regular file: a FIFO or a device would hang the start or never end.
// It may be a symbolic link (a mounted Kubernetes Secret is one).
func ReadKeys(path string) ([][]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|snapshot.NonBlock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<16))
	if err != nil {
		return nil, err
	}
	keys, err := ParseKeys(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}
