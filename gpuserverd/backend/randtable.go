package backend

import "fmt"

// cuRAND's host tables (curandGetDirectionVectors32/64, curandGetScrambleConstants32/64): arrays
// in NVIDIA's libcurand that a program copies to the device for its own quasi-random kernels
// (curand_kernel.h). The guest asks for them once (wire RandTable) and keeps them; the values are
// those of the server's NVIDIA library, never gpucloud's own.

// The tables, as the wire names them: a curandDirectionVectorSet_t for direction vectors, 1 and 2
// for the scramble constants.
const (
	RandDirections32          uint32 = 101 // CURAND_DIRECTION_VECTORS_32_JOEKUO6
	RandScrambledDirections32 uint32 = 102 // CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6
	RandDirections64          uint32 = 103 // CURAND_DIRECTION_VECTORS_64_JOEKUO6
	RandScrambledDirections64 uint32 = 104 // CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6
	RandScramble32            uint32 = 1
	RandScramble64            uint32 = 2
)

// RandTableDims is how many dimensions each table holds (curand.h: 20,000 for every set).
const RandTableDims = 20000

// RandTableSize is a table's size in bytes: per dimension 32 vectors of 4 bytes or 64 of 8, or one
// constant of 4 or 8 bytes. An unknown table is CURAND_STATUS_OUT_OF_RANGE, as NVIDIA answers a
// bad set.
func RandTableSize(table uint32) (uint64, error) {
	switch table {
	case RandDirections32, RandScrambledDirections32:
		return RandTableDims * 32 * 4, nil
	case RandDirections64, RandScrambledDirections64:
		return RandTableDims * 64 * 8, nil
	case RandScramble32:
		return RandTableDims * 4, nil
	case RandScramble64:
		return RandTableDims * 8, nil
	}
	return 0, &LibError{Lib: LibRand, Op: "RandTable", Status: libInvalid[LibRand],
		Detail: fmt.Sprintf("table %d: not a direction-vector set (101-104) or scramble constants (1, 2)", table)}
}

// RandTables is a Context that gives cuRAND's host tables: RandTable returns table's bytes
// (RandTableSize long), which the caller only reads.
type RandTables interface {
	RandTable(table uint32) ([]byte, error)
}
