package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tarfa-ai/tarfa/jnf"
)

// A file being written lives under jnf.PartialName(path) beside a journal
// (.NAME.journal) of JSON lines: a header naming the file and the SHA-256 of
// its planned record table (offsets fixed, digests zero), then one line per
// finished record with the digests of the bytes written for it, in table
// order. A conversion killed part-way through a 5 GB layer file resumes at
// its first unfinished record: each journaled record is re-hashed from the
// partial file and kept only if both digests match (re-verified, not
// trusted); the first record that does not check out, and every one after
// it, is written again. A journal whose plan differs from the current one
// (another checkpoint, another format version) discards the partial file.

const journalFormat = "tarfa-convert-journal/1"

type journalHeader struct {
	Format     string `json:"format"`
	File       string `json:"file"`
	PlanSHA256 string `json:"plan_sha256"`
}

type journalLine struct {
	Record int    `json:"record"`
	SHA256 string `json:"sha256"`
	BLAKE3 string `json:"blake3"`
}

// maxJournalSize bounds the journal of a file of n records: its header
// (about 150 bytes) and one line per record (about 160 bytes: the index and
// two 64-digit digests), with room to spare.
func maxJournalSize(n int) int64 { return 4<<10 + 512*int64(n) }

func journalName(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+".journal")
}

// removePartial deletes the partial file and journal of path, if any.
func removePartial(path string) error {
	for _, p := range []string{jnf.PartialName(path), journalName(path)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

type journal struct {
	f    *os.File
	path string
}

// resumeJournal opens the journal of the file at path for the plan
// planSum, re-hashes the records it lists from the partial file f, and
// returns how many leading records of recs checked out, with their digests
// filled in. The journal is rewritten to hold exactly those records, so a
// torn or failed tail is gone before new lines are appended.
func resumeJournal(ctx context.Context, path, planSum string, f *os.File, recs []jnf.Record,
	progress func(int64), warn func(msg string, args ...any)) (j *journal, kept int, err error) {
	jpath := journalName(path)
	hdr := journalHeader{Format: journalFormat, File: filepath.Base(path), PlanSHA256: planSum}
	var lines [][]byte
	var tooBig *jnf.LimitError
	if data, err := jnf.ReadFileLimit(jpath, maxJournalSize(len(recs)), "journal"); err == nil {
		lines = bytes.SplitAfter(data, []byte("\n"))
	} else if errors.As(err, &tooBig) {
		warn("discarding an interrupted file whose journal is larger than any journal of its plan", "file", hdr.File, "journal", jpath, "bytes", tooBig.Size)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, 0, err
	}
	keep := [][]byte{}
	if len(lines) > 0 {
		var got journalHeader
		if err := strictUnmarshal(lines[0], &got); err != nil || got != hdr {
			warn("discarding an interrupted file written for another plan", "file", hdr.File, "journal", jpath)
			lines = nil
		} else {
			lines = lines[1:]
		}
	}
	buf := make([]byte, 4<<20)
	for _, line := range lines {
		if kept == len(recs) || len(line) == 0 { // len 0: after the last newline
			break
		}
		r := &recs[kept]
		var l journalLine
		if err := strictUnmarshal(line, &l); err != nil || l.Record != kept {
			warn("journal ends in a torn or foreign line; resuming before it", "file", hdr.File, "record", r.Name)
			break
		}
		h := jnf.NewHasher()
		n, err := io.CopyBuffer(h, &ctxReader{ctx: ctx, r: io.NewSectionReader(f, r.Offset, r.Length)}, buf)
		d := h.Sum()
		if err != nil || n != r.Length {
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			warn("interrupted record is short; writing it again", "file", hdr.File, "record", r.Name, "got", n, "want", r.Length, "err", err)
			break
		}
		if d.SHA256.Hex() != l.SHA256 || d.BLAKE3.Hex() != l.BLAKE3 {
			warn("interrupted record does not match its journaled digests; writing it again", "file", hdr.File, "record", r.Name, "offset", r.Offset)
			break
		}
		r.SHA256, r.BLAKE3 = l.SHA256, l.BLAKE3
		keep = append(keep, line)
		progress(r.Length)
		kept++
	}
	if kept == 0 {
		// Nothing provably good: start the file afresh.
		if err := f.Truncate(0); err != nil {
			return nil, 0, err
		}
	}
	h, err := json.Marshal(hdr)
	if err != nil {
		return nil, 0, err
	}
	data := append(h, '\n')
	for _, l := range keep {
		data = append(data, l...)
	}
	if err := jnf.WriteFileAtomic(jpath, data, 0o644); err != nil {
		return nil, 0, err
	}
	jf, err := os.OpenFile(jpath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, 0, err
	}
	return &journal{f: jf, path: jpath}, kept, nil
}

// record appends one finished record. The data need not be synced first: a
// later resume re-hashes it before keeping it.
func (j *journal) record(i int, r *jnf.Record) error {
	b, err := json.Marshal(journalLine{Record: i, SHA256: r.SHA256, BLAKE3: r.BLAKE3})
	if err != nil {
		return err
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }

// strictUnmarshal decodes one complete JSON line with no unknown fields.
func strictUnmarshal(line []byte, v any) error {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		return errors.New("incomplete line")
	}
	return jnf.DecodeJSON(line, v)
}
