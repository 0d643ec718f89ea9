package docs

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// markdownFiles are README.md and every markdown file under docs/, as
// paths from the root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		rel, err := filepath.Rel(root, path)
		files = append(files, rel)
		return err
	})
	require.NoError(t, err)
	return files
}

func TestEveryRelativeLinkOfTheDocumentationLeadsToAFileThatExists(t *testing.T) {
	anchors := map[string]map[string]bool{} // by path from the root
	links := 0
	for _, file := range markdownFiles(t) {
		src, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		for _, target := range linkTargets(string(src)) {
			if isAbsolute(target) {
				continue
			}
			links++
			raw, fragment, _ := strings.Cut(target, "#")
			raw, _, _ = strings.Cut(raw, "?")
			p, err := url.PathUnescape(raw)
			if !assert.NoError(t, err, "%s: link %q", file, target) {
				continue
			}
			dest := file // a link to "#heading" stays in the file
			if p != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(p))
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", file, target, dest)
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				src, err := os.ReadFile(filepath.Join(root, dest))
				require.NoError(t, err)
				anchors[dest] = headingAnchors(string(src))
			}
			assert.True(t, anchors[dest][fragment], "%s: link %q: %s has no heading whose anchor is #%s", file, target, dest, fragment)
		}
	}
	assert.Greater(t, links, 20, "the README alone links to more documents than that: is the link parser broken?")
}

func TestLinksAreFoundOutsideCodeOnly(t *testing.T) {
	src := "See [the swap](docs/swap.md#the-steps) and ![a picture](img/a.png \"title\").\n" +
		"A link [across\nlines](two.md), `[not](in-code.md)` and ``[nor](in.md) this``.\n\n" +
		"```\n[not](in-a-fence.md)\n```\n\n" +
		"[ref]: <defined.md>\n" +
		"| [in](table.md) \\| cell | <https://example.com> |\n"
	assert.Equal(t, []string{"docs/swap.md#the-steps", "img/a.png", "two.md", "table.md", "defined.md"}, linkTargets(src))
	assert.True(t, isAbsolute("https://example.com/x.md"))
	assert.True(t, isAbsolute("mailto:someone@example.com"))
	assert.False(t, isAbsolute("docs/swap.md"))
}

func TestHeadingAnchorsAreGitHubs(t *testing.T) {
	src := "# `fleet-role plan`: the format\n\n## Asking why a swap waits: `make demo-plan`\n\n" +
		"### Controller: `[leader_election]`\n\n## Tests\n\n## Tests\n\n```\n# not a heading\n```\n"
	assert.Equal(t, map[string]bool{
		"fleet-role-plan-the-format":             true,
		"asking-why-a-swap-waits-make-demo-plan": true,
		"controller-leader_election":             true,
		"tests":                                  true,
		"tests-1":                                true,
	}, headingAnchors(src))
}

var (
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title; the text may hold escaped brackets and span lines.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]\\]|\\.)*\]\(\s*(<[^>]*>|[^\s()]+)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// referenceDefinition is [label]: target, on a line of its own.
	referenceDefinition = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	fence               = regexp.MustCompile("^ {0,3}(```|~~~)")
	atxHeading          = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	scheme              = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// linkTargets are the targets of the inline links and images and then of
// the reference definitions of a markdown text, paragraph by paragraph,
// leaving out what stands in fenced code blocks and code spans.
func linkTargets(src string) []string {
	var targets []string
	for _, paragraph := range strings.Split(outsideFences(src), "\n\n") {
		text := withoutCodeSpans(paragraph)
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			targets = append(targets, strings.Trim(m[1], "<>"))
		}
		for _, m := range referenceDefinition.FindAllStringSubmatch(text, -1) {
			targets = append(targets, strings.Trim(m[1], "<>"))
		}
	}
	return targets
}

// isAbsolute says a target leaves the repository: a URL with a scheme, or
// one that starts with "//".
func isAbsolute(target string) bool {
	return scheme.MatchString(target) || strings.HasPrefix(target, "//")
}

// outsideFences blanks the lines of fenced code blocks, fences included.
func outsideFences(src string) string {
	lines := strings.Split(src, "\n")
	open := ""
	for i, line := range lines {
		m := fence.FindStringSubmatch(line)
		switch {
		case open == "" && m != nil:
			open = m[1]
		case open != "" && m != nil && m[1] == open:
			open = ""
		case open == "":
			continue
		}
		lines[i] = ""
	}
	return strings.Join(lines, "\n")
}

// withoutCodeSpans removes the code spans of a paragraph: a run of
// backticks to the next run of as many. A run with no match is literal.
func withoutCodeSpans(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		n := i
		for n < len(s) && s[n] == '`' {
			n++
		}
		run := s[i:n]
		end := closingRun(s[n:], len(run))
		if end < 0 {
			b.WriteString(s[:n])
			s = s[n:]
			continue
		}
		b.WriteString(s[:i])
		s = s[n+end+len(run):]
	}
}

// closingRun is where in s a run of exactly n backticks starts, or -1.
func closingRun(s string, n int) int {
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		if j-i == n {
			return i
		}
		i = j
	}
	return -1
}

// headingAnchors are the anchors GitHub gives a file's ATX headings: the
// heading's text in lower case, links read as their text, every character
// but letters, digits, "_", "-" and spaces dropped, spaces made "-"; a
// repeated anchor gets "-1", "-2" and so on.
func headingAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(outsideFences(src), "\n") {
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text := inlineLink.ReplaceAllStringFunc(m[1], func(link string) string {
			return link[strings.Index(link, "[")+1 : strings.LastIndex(link, "](")]
		})
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), unicode.Is(unicode.Mn, r), r == '_', r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			seen[anchor]++
			anchor += "-" + strconv.Itoa(n)
		} else {
			seen[anchor] = 1
		}
		anchors[anchor] = true
	}
	return anchors
}
