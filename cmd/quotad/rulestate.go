package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/quota-platform/quota/rules"
)

// ruleState is QUOTA_RULES_STATE: a file, outside the project's tree,
// where this instance keeps the last rules it put in force (through PUT
// /v1/rules, SIGHUP or the shared store) and the version its rules file had
// then. The rules file itself is the operator's and is never written.
//
// At start it is used only where the shared store cannot decide: with
// QUOTA_RULES_STORE=file, or with the store unreachable. Then the kept
// rules are in force if the rules file is unchanged since they were kept
// (an edited file wins, as it does with the store). An empty path keeps
// nothing: the API's rules live in the shared store only.
type ruleState struct {
	path string

	mu          sync.Mutex
	fileVersion string // the rules file's version: at start, then at each SIGHUP
}

const stateVersionLine = "# rules_file_version: "

// newRuleState checks that path (absolute, QUOTA_RULES_STATE) can be
// written: its directory exists, and a state already there parses.
func newRuleState(path, rulesPath, fileVersion string) (*ruleState, error) {
	st := &ruleState{path: path, fileVersion: fileVersion}
	if path == "" {
		return st, nil
	}
	if abs, err := filepath.Abs(rulesPath); err == nil && abs == filepath.Clean(path) {
		return nil, fmt.Errorf("QUOTA_RULES_STATE %s: is the rules file (QUOTA_RULES), which is the operator's; give another path", path)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("QUOTA_RULES_STATE %s: its directory does not exist", path)
	}
	if _, _, err := st.read(); err != nil {
		return nil, err
	}
	return st, nil
}

// fromFile runs publish, which puts file (the rules file read again on
// SIGHUP) in force, with file's version as the rules file's: kept with it
// on success, the previous one restored on failure.
func (st *ruleState) fromFile(file *rules.Set, publish func() error) error {
	st.mu.Lock()
	prev := st.fileVersion
	st.fileVersion = file.Version
	st.mu.Unlock()
	err := publish()
	if err != nil {
		st.mu.Lock()
		st.fileVersion = prev
		st.mu.Unlock()
	}
	return err
}

// keep saves set as the rules in force, atomically (temporary file, rename).
func (st *ruleState) keep(set *rules.Set) error {
	if st.path == "" {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	doc, err := set.MarshalYAML()
	if err != nil {
		return fmt.Errorf("QUOTA_RULES_STATE: %w", err)
	}
	var b bytes.Buffer
	b.WriteString("# The rules last in force on this quotad (QUOTA_RULES_STATE); written by quotad.\n")
	b.WriteString("# Used at start with QUOTA_RULES_STORE=file or the shared store unreachable,\n")
	b.WriteString("# while the rules file still has the version below.\n")
	b.WriteString(stateVersionLine + st.fileVersion + "\n")
	b.Write(doc)
	dir, base := filepath.Split(st.path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("QUOTA_RULES_STATE: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("QUOTA_RULES_STATE: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("QUOTA_RULES_STATE: %w", err)
	}
	if err := os.Rename(tmp.Name(), st.path); err != nil {
		return fmt.Errorf("QUOTA_RULES_STATE: %w", err)
	}
	return nil
}

// read returns the kept rules and the rules file's version when they were
// kept; nil when nothing is kept.
func (st *ruleState) read() (*rules.Set, string, error) {
	if st.path == "" {
		return nil, "", nil
	}
	b, err := os.ReadFile(st.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("QUOTA_RULES_STATE: %w", err)
	}
	set, err := rules.ParseYAML(b)
	if err != nil {
		return nil, "", fmt.Errorf("QUOTA_RULES_STATE %s: %w (remove the file to start from the rules file)", st.path, err)
	}
	var fileVersion string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), stateVersionLine); ok {
			fileVersion = strings.TrimSpace(v)
			break
		}
	}
	return set, fileVersion, nil
}

// start returns the rules to start with where the store cannot decide:
// the kept ones when the rules file is unchanged since, else the file's.
func (st *ruleState) start(file *rules.Set) (*rules.Set, bool) {
	kept, fileVersion, err := st.read()
	if err != nil || kept == nil || fileVersion != file.Version {
		return file, false
	}
	return kept, true
}
