package docgen

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve: every relative link in the user docs leads somewhere. The file or
// directory it names exists, and a #fragment into a Markdown file names one of that file's
// headings, as GitHub makes their anchors. Links in code spans and fenced blocks are text, and
// links with a scheme (https:, mailto:) are not checked.
func TestDocLinksResolve(t *testing.T) {
	root, err := filepath.Abs(repositoryRoot)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := map[string]bool{}
		for _, anchor := range headingAnchors(string(data)) {
			a[anchor] = true
		}
		anchors[path] = a
		return a, nil
	}
	links := 0
	files := forEachUserDoc(t, root, func(rel, path, text string) {
		for _, link := range markdownLinks(text) {
			links++
			if problem := checkLink(root, path, link.target, anchorsOf); problem != "" {
				t.Errorf("%s:%d links to %s: %s", rel, link.line, link.target, problem)
			}
		}
	})
	t.Logf("%d docs, %d relative and external links", files, links)
	if files < 10 || links < 20 {
		t.Fatalf("found only %d docs with %d links; the patterns are broken", files, links)
	}
}

// checkLink says what is wrong with a link from the file at path, or "" if nothing is.
func checkLink(root, path, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if hasScheme.MatchString(target) {
		return ""
	}
	file, fragment, _ := strings.Cut(target, "#")
	file, err := url.PathUnescape(file)
	if err != nil {
		return err.Error()
	}
	fragment, err = url.PathUnescape(fragment)
	if err != nil {
		return err.Error()
	}
	resolved := path
	switch {
	case file == "":
	case strings.HasPrefix(file, "/"):
		resolved = filepath.Join(root, filepath.FromSlash(file))
	default:
		resolved = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
	}
	if rel, err := filepath.Rel(root, resolved); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "it leaves the repository"
	}
	info, err := os.Stat(resolved)
	if err != nil {
		return "no such file or directory"
	}
	if fragment == "" || info.IsDir() || !strings.HasSuffix(resolved, ".md") {
		return ""
	}
	anchors, err := anchorsOf(resolved)
	if err != nil {
		return err.Error()
	}
	if !anchors[fragment] {
		return fmt.Sprintf("no heading there has the anchor #%s", fragment)
	}
	return ""
}

var (
	hasScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	// A link reference definition: [label]: target.
	linkDefinition = regexp.MustCompile(`(?m)^ {0,3}\[[^\[\]\n]+\]:[ \t]*(<[^<>\n]*>|\S+)`)
	// An inline link or image: [text](target) or [text](target "title"); the text may hold
	// one level of brackets and wrap onto the next line.
	inlineLink = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^<>\n]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?\s*\)`)
	fenceOpen  = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})")
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$`)
	closingATX = regexp.MustCompile(`(?:^|[ \t]+)#+$`)
	backticks  = regexp.MustCompile("`+")
)

type docLink struct {
	line   int
	target string
}

// markdownLinks lists the inline links and link reference definitions of a Markdown document
// with their line numbers, in order, leaving out those in fenced code blocks and code spans.
func markdownLinks(doc string) []docLink {
	text := maskCode(doc)
	type match struct{ at, start, end int }
	var matches []match
	for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
		matches = append(matches, match{m[0], m[4], m[5]})
	}
	for _, m := range linkDefinition.FindAllStringSubmatchIndex(text, -1) {
		matches = append(matches, match{m[0], m[2], m[3]})
	}
	slices.SortFunc(matches, func(a, b match) int { return a.at - b.at })
	var links []docLink
	for _, m := range matches {
		target := strings.TrimSuffix(strings.TrimPrefix(text[m.start:m.end], "<"), ">")
		links = append(links, docLink{line: strings.Count(text[:m.at], "\n") + 1, target: target})
	}
	return links
}

// maskCode blanks out fenced code blocks and code spans, keeping the line breaks, so that what
// looks like a link there is not taken for one.
func maskCode(doc string) string {
	var out strings.Builder
	for _, paragraph := range strings.Split(maskFences(doc), "\n\n") {
		if out.Len() > 0 {
			out.WriteString("\n\n")
		}
		out.WriteString(maskCodeSpans(paragraph))
	}
	return out.String()
}

// maskFences blanks the lines of fenced code blocks, fences included.
func maskFences(doc string) string {
	lines := strings.Split(doc, "\n")
	var fence string
	for i, line := range lines {
		if fence != "" {
			trimmed := strings.TrimSpace(line)
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
			lines[i] = ""
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil && (m[1][0] != '`' || !strings.Contains(line[len(m[0]):], "`")) {
			fence = m[1]
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// maskCodeSpans blanks the code spans of one paragraph: a run of backticks opens one that the
// next run of the same length closes; a run that nothing closes is literal.
func maskCodeSpans(paragraph string) string {
	b := []byte(paragraph)
	runs := backticks.FindAllStringIndex(paragraph, -1)
	for i := 0; i < len(runs); i++ {
		open := runs[i]
		for j := i + 1; j < len(runs); j++ {
			if runs[j][1]-runs[j][0] != open[1]-open[0] {
				continue
			}
			for k := open[0]; k < runs[j][1]; k++ {
				if b[k] != '\n' {
					b[k] = ' '
				}
			}
			i = j
			break
		}
	}
	return string(b)
}

// headingAnchors lists the anchors GitHub gives the ATX headings of a Markdown document, in
// order: a heading whose anchor was taken already gets -1, -2, ... appended.
func headingAnchors(doc string) []string {
	seen := map[string]bool{}
	var anchors []string
	for _, line := range strings.Split(maskFences(doc), "\n") {
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		base := headingAnchor(closingATX.ReplaceAllString(m[2], ""))
		anchor := base
		for n := 1; seen[anchor]; n++ {
			anchor = fmt.Sprintf("%s-%d", base, n)
		}
		seen[anchor] = true
		anchors = append(anchors, anchor)
	}
	return anchors
}

var headingLink = regexp.MustCompile(`!?\[([^\[\]]*)\]\([^()]*\)`)

// headingAnchor is the anchor GitHub makes of a heading's text: the text as rendered (a link
// by its text), lowercased, without punctuation and symbols but for - and _, with each space
// a -.
func headingAnchor(heading string) string {
	text := strings.ToLower(headingLink.ReplaceAllString(heading, "$1"))
	var b strings.Builder
	for _, r := range text {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestHeadingAnchor(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"How Services of type LoadBalancer map to IronCore", "how-services-of-type-loadbalancer-map-to-ironcore"},
		{"Beside MetalLB and Cilium: loadBalancerClass", "beside-metallb-and-cilium-loadbalancerclass"},
		{"Traffic at 1,000 Nodes: third pass", "traffic-at-1000-nodes-third-pass"},
		{"`make chaos`", "make-chaos"},
		{"Pod CIDRs from IronCore's IPAM: 300 dual-stack Nodes", "pod-cidrs-from-ironcores-ipam-300-dual-stack-nodes"},
		{"ironcore-ccm-inspect: what the CCM sees, and what differs", "ironcore-ccm-inspect-what-the-ccm-sees-and-what-differs"},
		{"See [the guide](docs/guides/install.md) now", "see-the-guide-now"},
		{"snake_case and (parentheses) / slashes", "snake_case-and-parentheses--slashes"},
		{"Größe ändern", "größe-ändern"},
	} {
		if got := headingAnchor(tc.heading); got != tc.want {
			t.Errorf("headingAnchor(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestHeadingAnchors(t *testing.T) {
	doc := "# Title\n\n## Steps ##\n\n```sh\n# not a heading\n```\n\n## Steps\n\n### Steps\n\n#no-space is text\n"
	want := []string{"title", "steps", "steps-1", "steps-2"}
	if got := headingAnchors(doc); !slices.Equal(got, want) {
		t.Errorf("headingAnchors = %q, want %q", got, want)
	}
}

func TestMarkdownLinks(t *testing.T) {
	doc := "See [a](a.md#x) and [b\nwraps](../b.md \"title\").\n\n`[code](no.md)` and ![img](p.png)\n\n```\n[fenced](no.md)\n```\n[mail](mailto:x@example.com) [<c>](<c d.md>)\n\n  ~~~\n  [indented fence](no.md)\n  ~~~\n[ref]: docs/ref.md#y\n"
	var got []string
	for _, link := range markdownLinks(doc) {
		got = append(got, fmt.Sprintf("%d:%s", link.line, link.target))
	}
	want := []string{"1:a.md#x", "1:../b.md", "4:p.png", "9:mailto:x@example.com", "9:c d.md", "14:docs/ref.md#y"}
	if !slices.Equal(got, want) {
		t.Errorf("markdownLinks = %q, want %q", got, want)
	}
}
