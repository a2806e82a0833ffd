// Copyright 2009 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package jpeg

import (
	"io"
	"sync"
)

// maxCodeLength is the maximum (inclusive) number of bits in a Huffman code.
const maxCodeLength = 16

// maxNCodes is the maximum (inclusive) number of codes in a Huffman tree.
const maxNCodes = 256

// lutSize is the log-2 size of the Huffman decoder's look-up table.
const lutSize = 8

// fastBits is the log-2 size of a table's fast look-up (huffman.fast): wide enough that most
// AC codes of a photograph fit with their extra bits, small enough to stay in the L1 cache.
const fastBits = 10

// huffman is a Huffman decoder, specified in section C.
type huffman struct {
	// length is the number of codes in the tree.
	nCodes int32
	// lut is the look-up table for the next lutSize bits in the bit-stream.
	// The high 8 bits of the uint16 are the encoded value. The low 8 bits
	// are 1 plus the code length, or 0 if the value is too large to fit in
	// lutSize bits.
	lut [1 << lutSize]uint16
	// vals are the decoded values, sorted by their encoding.
	vals [maxNCodes]uint8
	// minCodes[i] is the minimum code of length i, or -1 if there are no
	// codes of that length.
	minCodes [maxCodeLength]int32
	// maxCodes[i] is the maximum code of length i, or -1 if there are no
	// codes of that length.
	maxCodes [maxCodeLength]int32
	// valsIndices[i] is the index into vals of minCodes[i].
	valsIndices [maxCodeLength]int32
	// fast, an AC table's (nil before its DHT), is read by the sequential scan's AC loop:
	// indexed by the next fastBits bits of the stream, it gives the code they start with as
	// value<<9 | code length<<5 | the bits to take, and with it the coefficient of its extra
	// bits when they fit, as coefficient<<17 (a coefficient is never 0; the bits to take are
	// then the code's and the extra bits); 0 when the code is longer than fastBits. It lives
	// in the decoder's fastTables.
	fast *fastTable
}

// A fastTable is a huffman's fast look-up.
type fastTable [1 << fastBits]int32

// fastTables are a decoder's fast look-ups, one per AC table, taken from fastPool at the
// first DHT and given back when the decode ends: at 32 KiB they would otherwise make every
// decoder (and DecodeConfig) allocate and clear three times what image/jpeg's does.
type fastTables [maxTh + 1]fastTable

var fastPool = sync.Pool{New: func() any { return new(fastTables) }}

// noFast is the look-up of a table that has none: every entry sends the AC loop to the
// look-up table and the slow path.
var noFast fastTable

// errShortHuffmanData means that an unexpected EOF occurred while decoding
// Huffman data.
var errShortHuffmanData = FormatError("short Huffman data")

// ensureNBits reads bytes from the byte buffer to ensure that d.bits.n is at
// least n. For best performance (avoiding function calls inside hot loops),
// the caller is the one responsible for first checking that d.bits.n < n.
func (d *decoder) ensureNBits(n int32) error {
	if d.fillFast(); d.bits.n >= n {
		return nil
	}
	for {
		c, err := d.readByteStuffedByte()
		if err != nil {
			if err == io.ErrUnexpectedEOF {
				return errShortHuffmanData
			}
			return err
		}
		d.bits.a = d.bits.a<<8 | uint64(c)
		d.bits.n += 8
		if d.bits.n >= n {
			break
		}
	}
	return nil
}

// receiveExtend is the composition of RECEIVE and EXTEND, specified in section
// F.2.2.1.
// fillFast moves whole bytes from d.bytes into d.bits, up to 64 bits, while the next byte is
// not 0xff (a stuffed byte or a marker, which readByteStuffedByte handles). It reads only what
// is buffered and never fails; the bytes it moves cannot be unread, which loses nothing: the
// only bytes ever given back are a marker's, and it never takes those.
func (d *decoder) fillFast() {
	i, a, n := d.bytes.i, d.bits.a, d.bits.n
	for n <= 56 && i < d.bytes.j {
		c := d.bytes.buf[i]
		if c == 0xff {
			break
		}
		a = a<<8 | uint64(c)
		n += 8
		i++
	}
	if i != d.bytes.i {
		d.bytes.i, d.bits.a, d.bits.n = i, a, n
		d.bytes.nUnreadable = 0
	}
}

func (d *decoder) receiveExtend(t uint8) (int32, error) {
	if d.bits.n < int32(t) {
		if err := d.ensureNBits(int32(t)); err != nil {
			return 0, err
		}
	}
	d.bits.n -= int32(t)
	s := int32(1) << t
	x := int32(d.bits.a>>uint8(d.bits.n)) & (s - 1)
	if x < s>>1 {
		x += ((-1) << t) + 1
	}
	return x, nil
}

// processDHT processes a Define Huffman Table marker, and initializes a huffman
// struct from its contents. Specified in section B.2.4.2.
func (d *decoder) processDHT(n int) error {
	for n > 0 {
		if n < 17 {
			return FormatError("DHT has wrong length")
		}
		if err := d.readFull(d.tmp[:17]); err != nil {
			return err
		}
		tc := d.tmp[0] >> 4
		if tc > maxTc {
			return FormatError("bad Tc value")
		}
		th := d.tmp[0] & 0x0f
		// The baseline th <= 1 restriction is specified in table B.5.
		if th > maxTh || (d.baseline && th > 1) {
			return FormatError("bad Th value")
		}
		h := &d.huff[tc][th]

		// Read nCodes and h.vals (and derive h.nCodes).
		// nCodes[i] is the number of codes with code length i.
		// h.nCodes is the total number of codes.
		h.nCodes = 0
		var nCodes [maxCodeLength]int32
		for i := range nCodes {
			nCodes[i] = int32(d.tmp[i+1])
			h.nCodes += nCodes[i]
		}
		if h.nCodes == 0 {
			return FormatError("Huffman table has zero length")
		}
		if h.nCodes > maxNCodes {
			return FormatError("Huffman table has excessive length")
		}
		n -= int(h.nCodes) + 17
		if n < 0 {
			return FormatError("DHT has wrong length")
		}
		if err := d.readFull(h.vals[:h.nCodes]); err != nil {
			return err
		}

		// Derive the look-up table.
		clear(h.lut[:])
		var x, code uint32
		for i := uint32(0); i < lutSize; i++ {
			code <<= 1
			for j := int32(0); j < nCodes[i]; j++ {
				// The codeLength is 1+i, so shift code by 8-(1+i) to
				// calculate the high bits for every 8-bit sequence
				// whose codeLength's high bits matches code.
				// The high 8 bits of lutValue are the encoded value.
				// The low 8 bits are 1 plus the codeLength.
				base := uint8(code << (7 - i))
				lutValue := uint16(h.vals[x])<<8 | uint16(2+i)
				for k := uint8(0); k < 1<<(7-i); k++ {
					h.lut[base|k] = lutValue
				}
				code++
				x++
			}
		}

		if tc == acTable {
			if d.fastTables == nil {
				d.fastTables = fastPool.Get().(*fastTables)
			}
			h.fast = &d.fastTables[th]
			h.fast.build(&nCodes, &h.vals)
		}

		// Derive minCodes, maxCodes, and valsIndices.
		var c, index int32
		for i, n := range nCodes {
			if n == 0 {
				h.minCodes[i] = -1
				h.maxCodes[i] = -1
				h.valsIndices[i] = -1
			} else {
				h.minCodes[i] = c
				h.maxCodes[i] = c + n - 1
				h.valsIndices[i] = index
				c += n
				index += n
			}
			c <<= 1
		}
	}
	return nil
}

// decodeHuffman returns the next Huffman-coded value from the bit-stream,
// decoded according to h.
func (d *decoder) decodeHuffman(h *huffman) (uint8, error) {
	if h.nCodes == 0 {
		return 0, FormatError("uninitialized Huffman table")
	}

	if d.bits.n < 8 {
		if err := d.ensureNBits(8); err != nil {
			if err != errMissingFF00 && err != errShortHuffmanData {
				return 0, err
			}
			// There are no more bytes of data in this segment, but we may still
			// be able to read the next symbol out of the previously read bits.
			// First, undo the readByte that the ensureNBits call made.
			if d.bytes.nUnreadable != 0 {
				d.unreadByteStuffedByte()
			}
			goto slowPath
		}
	}
	if v := h.lut[(d.bits.a>>uint32(d.bits.n-lutSize))&0xff]; v != 0 {
		n := (v & 0xff) - 1
		d.bits.n -= int32(n)
		return uint8(v >> 8), nil
	}

slowPath:
	for i, code := 0, int32(0); i < maxCodeLength; i++ {
		if d.bits.n == 0 {
			if err := d.ensureNBits(1); err != nil {
				return 0, err
			}
		}
		if d.bits.a>>uint32(d.bits.n-1)&1 != 0 {
			code |= 1
		}
		d.bits.n--
		if code <= h.maxCodes[i] {
			return h.vals[h.valsIndices[i]+code-h.minCodes[i]], nil
		}
		code <<= 1
	}
	return 0, FormatError("bad Huffman code")
}

func (d *decoder) decodeBit() (bool, error) {
	if d.bits.n == 0 {
		if err := d.ensureNBits(1); err != nil {
			return false, err
		}
	}
	ret := d.bits.a>>uint32(d.bits.n-1)&1 != 0
	d.bits.n--
	return ret, nil
}

func (d *decoder) decodeBits(n int32) (uint32, error) {
	if d.bits.n < n {
		if err := d.ensureNBits(n); err != nil {
			return 0, err
		}
	}
	ret := uint32(d.bits.a >> uint32(d.bits.n-n))
	ret &= (1 << uint32(n)) - 1
	d.bits.n -= n
	return ret, nil
}

// build fills f from a table's code lengths and values: every code of length l ≤ fastBits
// fills the entries of every fastBits-bit sequence that starts with it with its value (run<<4 |
// size) and l, and, when its size s is not 0 and l+s ≤ fastBits, the coefficient its next s bits
// give (RECEIVE and EXTEND, section F.2.2.1), which is never 0; the other entries are 0. A
// table with more codes of some length than fit (a corrupt file) gets no entries, so that it
// decodes as the look-up table and the slow path decode it.
func (f *fastTable) build(nCodes *[maxCodeLength]int32, vals *[maxNCodes]uint8) {
	clear(f[:])
	var x, code int32
	for i, n := range nCodes {
		if code += n; code > 1<<(i+1) {
			return
		}
		code <<= 1
	}
	code = 0
	for i := int32(0); i < fastBits; i++ {
		l := i + 1
		free := fastBits - l // bits after the code
		for range nCodes[i] {
			rs := int32(vals[x])
			size := rs & 0x0f
			for k := range int32(1) << free {
				e := rs<<9 | l<<5 | l
				if size != 0 && size <= free {
					extra := k >> (free - size)
					value := extra
					if extra < 1<<(size-1) {
						value += (-1 << size) + 1
					}
					e = value<<17 | rs<<9 | l<<5 | (l + size)
				}
				f[code<<free|k] = e
			}
			code++
			x++
		}
		code <<= 1
	}
}

// releaseFast gives the decoder's fast look-ups back to fastPool; its tables lose them.
func (d *decoder) releaseFast() {
	if d.fastTables == nil {
		return
	}
	for th := range d.huff[acTable] {
		d.huff[acTable][th].fast = nil
	}
	fastPool.Put(d.fastTables)
	d.fastTables = nil
}
