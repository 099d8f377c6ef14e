package hot

import (
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/quota-platform/quota/tiers/warm"
)

// Every file of hot_check/ is joined into the script exactly once, in the
// order hotCheckParts names (a new algorithm's file cannot be left out),
// and the script every check runs is that join after directory.lua.
func TestHotCheckScript_JoinsEveryPartOnceInOrder(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(hotCheckFiles, "hot_check/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(f, "hot_check/"), ".lua"))
	}
	parts := slices.Clone(hotCheckParts[:])
	slices.Sort(parts)
	if !slices.Equal(names, parts) {
		t.Fatalf("hot_check/ holds %v, hotCheckParts names %v", names, parts)
	}
	src := hotCheckSource()
	at := 0
	for _, name := range hotCheckParts {
		part, err := hotCheckFiles.ReadFile("hot_check/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(src[at:], string(part))
		if i < 0 || strings.Count(src, string(part)) != 1 {
			t.Fatalf("%s.lua is not in the script once, after the parts before it", name)
		}
		at += i + len(part)
	}
	if got := NewStore(nil, Options{}).script; got.Hash() != warm.CheckScript(src).Hash() {
		t.Fatal("the store's script is not directory.lua + the joined parts")
	}
}
