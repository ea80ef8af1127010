package sim

import (
	"encoding/binary"
	"sync"

	"gpucloud/gpuserverd/backend"
)

// The simulated backend's cuRAND host tables: a test double of NVIDIA's, the same sizes and shape
// (dimension d's vectors one after another), deterministic, not Joe and Kuo's numbers. Dimension 0
// is what every Sobol' set starts with (vector k is 1 << (bits-1-k), the van der Corput
// sequence); the rest and the scramble constants are splitmix64 of (table, dimension, vector).
var simRandTables = struct {
	sync.Mutex
	t map[uint32][]byte
}{t: map[uint32][]byte{}}

// randTableWord is word i of the simulated table.
func randTableWord(table uint32, i uint64) uint64 {
	bits := uint64(32)
	if table == backend.RandDirections64 || table == backend.RandScrambledDirections64 || table == backend.RandScramble64 {
		bits = 64
	}
	v := splitmix(uint64(table)<<48 ^ i)
	if table > backend.RandScramble64 && i < bits { // dimension 0 of a direction-vector set
		v = 1 << (bits - 1 - i)
	}
	if bits == 32 {
		v &= 0xffffffff
	}
	return v
}

func (c *Context) RandTable(table uint32) ([]byte, error) {
	n, err := backend.RandTableSize(table)
	if err != nil {
		return nil, err
	}
	simRandTables.Lock()
	defer simRandTables.Unlock()
	if b, ok := simRandTables.t[table]; ok {
		return b, nil
	}
	b := make([]byte, n)
	if table == backend.RandDirections64 || table == backend.RandScrambledDirections64 || table == backend.RandScramble64 {
		for i := uint64(0); i < n/8; i++ {
			binary.LittleEndian.PutUint64(b[8*i:], randTableWord(table, i))
		}
	} else {
		for i := uint64(0); i < n/4; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(randTableWord(table, i)))
		}
	}
	simRandTables.t[table] = b
	return b, nil
}
