package sqlflight_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeStartCompiles builds every Go block of the
// README's "30-second start" as the program it is, written as is, so that the
// first code a reader copies compiles.
func TestReadmeStartCompiles(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeGoBlocks(t, string(readme), "## 30-second start")
	if len(blocks) < 2 {
		t.Fatalf("the 30-second start has %d Go blocks, want the start and the other entry points", len(blocks))
	}

	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the README's code: %v", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// The blocks are laid over the module as packages that do not exist on
	// disk, so that they build against this very checkout and its go.sum.
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		src := filepath.Join(tmp, fmt.Sprintf("block%d.go", i+1))
		if err := os.WriteFile(src, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
		pkg := fmt.Sprintf("./internal/readmestart/block%d", i+1)
		overlay[filepath.Join(root, pkg, "main.go")] = src
		pkgs = append(pkgs, pkg)
	}
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, js, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "bin")
	if err := os.Mkdir(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, append([]string{"build", "-overlay=" + overlayFile, "-o", bin + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's 30-second start does not compile as written: %v\n%s", err, out)
	}
}

// readmeGoBlocks returns the ```go blocks of the section headed heading.
func readmeGoBlocks(t *testing.T, readme, heading string) []string {
	t.Helper()
	start := strings.Index(readme, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("README has no %q section", heading)
	}
	section := readme[start+1:]
	if end := strings.Index(section[len(heading):], "\n## "); end >= 0 {
		section = section[:len(heading)+end]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)\n```go\n(.*?)\n```\n").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1]+"\n")
	}
	return blocks
}
