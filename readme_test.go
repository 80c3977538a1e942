package sqlflight_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
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

// readmeMaxLines is the most lines the README may have: it is the front
// door, and everything else is in a guide under docs/.
const readmeMaxLines = 300

// TestReadmeIsAFrontDoor: the README stays short, and every guide in docs/
// is on its map.
func TestReadmeIsAFrontDoor(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the detail to a guide in docs/", n, readmeMaxLines)
	}
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(guides) == 0 {
		t.Fatal("docs/ holds no guide")
	}
	linked := map[string]bool{}
	for _, l := range markdownLinks(string(readme)) {
		path, _, _ := strings.Cut(l, "#")
		linked[filepath.Clean(path)] = true
	}
	for _, g := range guides {
		if !linked[g] {
			t.Errorf("the README's map of the guides does not link %s", filepath.ToSlash(g))
		}
	}
}

// TestReadmeLinksResolve: every relative link of README.md and docs/*.md
// names a file that exists, relative to the document that holds it, and
// every #anchor names a heading of its target, by GitHub's slugs.
func TestReadmeLinksResolve(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{"README.md"}, docs...)
	anchors := map[string]map[string]bool{} // a Markdown file's heading slugs, by its cleaned path
	slugsOf := func(path string) map[string]bool {
		if s, ok := anchors[path]; ok {
			return s
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = markdownAnchors(string(b))
		return anchors[path]
	}
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range markdownLinks(string(b)) {
			if isAbsoluteLink(link) {
				continue
			}
			checked++
			rawPath, fragment, _ := strings.Cut(link, "#")
			path, err := url.PathUnescape(rawPath)
			if err != nil {
				t.Errorf("%s: link %q: %v", doc, link, err)
				continue
			}
			target := filepath.Clean(doc) // a bare #anchor names the document itself
			if path != "" {
				target = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %q: %s does not exist", doc, link, filepath.ToSlash(target))
				continue
			}
			if fragment == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: link %q: an anchor into %s, which is not Markdown", doc, link, filepath.ToSlash(target))
				continue
			}
			if !slugsOf(target)[fragment] {
				t.Errorf("%s: link %q: %s has no heading whose anchor is #%s", doc, link, filepath.ToSlash(target), fragment)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative link to check")
	}
	t.Logf("%d relative links checked in %d documents", checked, len(docs))
}

// TestReadmeGitHubSlug pins the anchors the documents link to, as GitHub makes
// them from the headings.
func TestReadmeGitHubSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"30-second start": "30-second-start",
		"What is shared: the server has the last word":                                                 "what-is-shared-the-server-has-the-last-word",
		"The NOTIFY feed (`sqlflight.feed=notify`): triggers, for servers without logical replication": "the-notify-feed-sqlflightfeednotify-triggers-for-servers-without-logical-replication",
		"Side by side (`go run ./bench -dsn postgres://…`)":                                            "side-by-side-go-run-bench--dsn-postgres",
		"pgx's own test suite":                "pgxs-own-test-suite",
		"Under an [ORM](orms.md) *or* `sqlc`": "under-an-orm-or-sqlc",
		"max_conns and MaxConns":              "max_conns-and-maxconns",
	} {
		if got := githubSlug(heading); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", heading, got, want)
		}
	}
	got := markdownAnchors("# Limits\n\n```sh\n# not a heading\n```\n\n## Limits\n### Limits ###\n")
	for _, want := range []string{"limits", "limits-1", "limits-2"} {
		if !got[want] {
			t.Errorf("markdownAnchors has no %q: %v", want, got)
		}
	}
	if got["not-a-heading"] || len(got) != 3 {
		t.Errorf("markdownAnchors = %v, want the three headings outside the code block", got)
	}
}

var (
	// inlineLink matches [text](target) and ![alt](target "title").
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// referenceLink matches a link reference definition: [label]: target.
	referenceLink = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	// codeSpan matches an inline code span, whose text is not Markdown.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// atxHeading matches a heading line: # Title, ## Title ##.
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	// linkText keeps the text of a link inside a heading.
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// markdownProse returns the lines of a Markdown document outside fenced
// code blocks.
func markdownProse(doc string) []string {
	var lines []string
	fence := ""
	for _, l := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(l, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// markdownLinks returns the targets of the links and images of a Markdown
// document, outside code blocks and code spans.
func markdownLinks(doc string) []string {
	prose := codeSpan.ReplaceAllString(strings.Join(markdownProse(doc), "\n"), "")
	var links []string
	for _, re := range []*regexp.Regexp{inlineLink, referenceLink} {
		for _, m := range re.FindAllStringSubmatch(prose, -1) {
			links = append(links, m[1])
		}
	}
	return links
}

// isAbsoluteLink reports whether a link leaves the repository: a URL with
// a scheme (https:, mailto:) or a protocol-relative one.
func isAbsoluteLink(link string) bool {
	if strings.HasPrefix(link, "//") {
		return true
	}
	u, err := url.Parse(link)
	return err == nil && u.Scheme != ""
}

// markdownAnchors returns the anchors GitHub gives the headings of a
// Markdown document: each heading's slug, and for a slug seen before, the
// slug with -1, -2, … appended.
func markdownAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range markdownProse(doc) {
		m := atxHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := githubSlug(m[2])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// githubSlug returns the anchor GitHub makes of a heading's text: the text
// as rendered (a link's text, no markup), lower-cased, every character
// other than a letter, a digit, a space, '-' or '_' dropped, and each space
// turned into '-'.
func githubSlug(heading string) string {
	text := linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
