package terminus

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/proctor-dev/proctor/agent/pystr"
)

// xmlParser is TerminusXMLPlainParser
// (src/harbor/agents/terminus_2/terminus_xml_plain_parser.py).
type xmlParser struct{}

func (xmlParser) format() string { return "xml" }

// xmlSections are the sections in the order Harbor looks for them.
var xmlSections = []string{"analysis", "plan", "commands", "task_complete"}

// sectionRE holds, per section, _extract_sections' full and self-closing
// patterns and the opening-tag pattern that counts and orders sections.
var sectionRE = func() map[string][3]*regexp.Regexp {
	m := map[string][3]*regexp.Regexp{}
	for _, s := range xmlSections {
		m[s] = [3]*regexp.Regexp{
			regexp.MustCompile(`(?s)<` + s + `>(.*?)</` + s + `>`),
			regexp.MustCompile(`<` + s + pystr.Space + `*/>`),
			regexp.MustCompile(`<` + s + `(?:` + pystr.Space + `|>|/>)`),
		}
	}
	return m
}()

var (
	keystrokesRE = regexp.MustCompile(`(?s)<keystrokes([^>]*)>(.*?)</keystrokes>`)
	durationRE   = regexp.MustCompile(`duration` + pystr.Space + `*=` + pystr.Space + `*["']([^"']*)["']`)
	unquotedRE   = regexp.MustCompile(`(` + pystr.Word + `+)` + pystr.Space + `*=` + pystr.Space + `*([^"'\t\n\v\f\r \x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}>]+)`)
	singleRE     = regexp.MustCompile(`(` + pystr.Word + `+)` + pystr.Space + `*=` + pystr.Space + `*'([^']*)'`)
	attrRE       = regexp.MustCompile(`(` + pystr.Word + `+)` + pystr.Space + `*=`)
	completeRE   = regexp.MustCompile(`(?i)<task_complete>` + pystr.Space + `*true` + pystr.Space + `*</task_complete>`)
)

// errTagSplit is the IndexError Harbor's _find_top_level_tags raises on a
// tag of only whitespace with a space in it ("<  >"): its parser fails
// instead of answering.
var errTagSplit = errors.New("xml parser: IndexError: list index out of range (a tag of only whitespace)")

// Parse is parse_response. Its one auto-fix, appending a missing
// </response>, waits for an error _try_parse_response never gives, so it
// never applies; neither does it here.
func (xmlParser) Parse(reply string) (Parsed, error) {
	var warnings []string
	checkExtraText(reply, &warnings)
	content := responseContent(reply)
	if content == "" {
		return Parsed{Error: "No <response> tag found", Warning: bullets(warnings)}, nil
	}
	complete := completeRE.MatchString(content)
	sections, err := extractSections(content, &warnings)
	if err != nil {
		return Parsed{}, err
	}
	analysis, plan := sections["analysis"], sections["plan"]
	commands, hasCommands := sections["commands"]
	if commands == "" {
		switch {
		case hasCommands:
			if !complete {
				warnings = append(warnings, "Commands section is empty; not taking any action. If you want to wait a specific amount of time please use `sleep`, but if you're waiting for a command to finish then continue to wait.")
			}
			return Parsed{Complete: complete, Warning: bullets(warnings), Analysis: analysis, Plan: plan}, nil
		case complete:
			return Parsed{Complete: true, Warning: bullets(warnings), Analysis: analysis, Plan: plan}, nil
		}
		return Parsed{Error: "Missing <commands> section", Warning: bullets(warnings), Analysis: analysis, Plan: plan}, nil
	}
	cmds := parseXMLCommands(commands, &warnings)
	return Parsed{Commands: cmds, Complete: complete, Warning: bullets(warnings), Analysis: analysis, Plan: plan}, nil
}

// checkExtraText is _check_extra_text.
func checkExtraText(reply string, warnings *[]string) {
	start := strings.Index(reply, "<response>")
	if start < 0 {
		return
	}
	if pystr.Strip(reply[:start]) != "" {
		*warnings = append(*warnings, "Extra text detected before <response> tag")
	}
	end := strings.Index(reply, "</response>")
	if end < 0 || pystr.Strip(reply[end+len("</response>"):]) == "" {
		return
	}
	*warnings = append(*warnings, "Extra text detected after </response> tag")
	if n := strings.Count(reply, "<response>"); n > 1 {
		*warnings = append(*warnings, "IMPORTANT: Only issue one <response> block at a time. You issued "+strconv.Itoa(n)+" and only the first was executed.")
	}
}

// responseContent is _extract_response_content.
func responseContent(reply string) string {
	start := strings.Index(reply, "<response>")
	if start < 0 {
		return ""
	}
	rest := reply[start+len("<response>"):]
	if end := strings.Index(rest, "</response>"); end >= 0 {
		rest = rest[:end]
	}
	return pystr.Strip(rest)
}

// extractSections is _extract_sections.
func extractSections(content string, warnings *[]string) (map[string]string, error) {
	sections := map[string]string{}
	for _, s := range xmlSections {
		re := sectionRE[s]
		if m := re[0].FindStringSubmatch(content); m != nil {
			sections[s] = pystr.Strip(m[1])
		} else if re[1].MatchString(content) {
			sections[s] = ""
		}
	}
	// Harbor walks sets here, whose order differs between Python
	// processes; the sections' order and the tags' first appearance here.
	for _, s := range xmlSections[:3] {
		if _, ok := sections[s]; !ok {
			*warnings = append(*warnings, "Missing <"+s+"> section")
		}
	}
	tags, err := topLevelTags(content)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, s := range xmlSections {
		seen[s] = true
	}
	for _, t := range tags {
		if !seen[t] {
			seen[t] = true
			*warnings = append(*warnings, "Unknown tag found: <"+t+">, expected analysis/plan/commands/task_complete")
		}
	}
	pos := map[string]int{}
	for _, s := range xmlSections {
		all := sectionRE[s][2].FindAllStringIndex(content, -1)
		if len(all) > 0 {
			pos[s] = all[0][0]
		}
		if len(all) > 1 {
			if s == "commands" {
				*warnings = append(*warnings, "IMPORTANT: Only issue one <commands> block at a time. You issued "+strconv.Itoa(len(all))+" and only the first was executed.")
			} else {
				*warnings = append(*warnings, "Multiple <"+s+"> sections found")
			}
		}
	}
	if w := orderWarning("Sections", pos); w != "" {
		*warnings = append(*warnings, w)
	}
	return sections, nil
}

// topLevelTags is _find_top_level_tags: the names of tags at depth 0.
func topLevelTags(content string) ([]string, error) {
	var tags []string
	depth := 0
	for i := 0; i < len(content); {
		if content[i] != '<' {
			i++
			continue
		}
		end := strings.IndexByte(content[i:], '>')
		if end < 0 {
			break
		}
		end += i
		tag := content[i+1 : end]
		i = end + 1
		switch {
		case strings.HasPrefix(tag, "!") || strings.HasPrefix(tag, "?"):
			continue
		case strings.HasPrefix(tag, "/"):
			depth--
			continue
		}
		name := tag
		if strings.Contains(tag, " ") {
			f := strings.FieldsFunc(tag, pystr.IsSpace)
			if len(f) == 0 {
				return nil, errTagSplit
			}
			name = f[0]
		}
		name = strings.TrimSuffix(name, "/")
		if depth == 0 {
			tags = append(tags, name)
		}
		if !strings.HasSuffix(tag, "/") {
			depth++
		}
	}
	return tags, nil
}

// parseXMLCommands is _parse_xml_commands.
func parseXMLCommands(content string, warnings *[]string) []Command {
	var out []Command
	matches := keystrokesRE.FindAllStringSubmatch(content, -1)
	for i, m := range matches {
		n := strconv.Itoa(i + 1)
		attrs, keys := m[1], m[2]
		checkAttributes(attrs, n, warnings)
		duration := 1.0
		if d := durationRE.FindStringSubmatch(attrs); d != nil {
			if f, ok := pystr.ParseFloat(d[1]); ok {
				duration = f
			} else {
				*warnings = append(*warnings, "Command "+n+": Invalid duration value '"+d[1]+"', using default 1.0")
			}
		} else {
			*warnings = append(*warnings, "Command "+n+": Missing duration attribute, using default 1.0")
		}
		if i < len(matches)-1 && !strings.HasSuffix(keys, "\n") {
			*warnings = append(*warnings, "Command "+n+" should end with newline when followed by another command. Otherwise the two commands will be concatenated together on the same line.")
		}
		out = append(out, Command{Keystrokes: keys, Duration: duration})
	}
	for _, e := range [][2]string{{"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}, {"&quot;", `"`}, {"&apos;", "'"}} {
		if strings.Contains(content, e[0]) {
			*warnings = append(*warnings, "Warning: "+e[0]+" is read verbatim and not converted to "+e[1]+". NEVER USE "+e[0]+", unless you want these exact characters to appear directly in the output.")
		}
	}
	if strings.Contains(content, `\r\n`) {
		*warnings = append(*warnings, `Warning: \r\n line endings are not necessary - use \n instead for simpler output`)
	}
	return out
}

// checkAttributes is _check_attribute_issues.
func checkAttributes(attrs, n string, warnings *[]string) {
	for _, m := range unquotedRE.FindAllStringSubmatch(attrs, -1) {
		*warnings = append(*warnings, "Command "+n+": Attribute '"+m[1]+"' value should be quoted: "+m[1]+`="`+m[2]+`"`)
	}
	for _, m := range singleRE.FindAllStringSubmatch(attrs, -1) {
		*warnings = append(*warnings, "Command "+n+": Use double quotes for attribute '"+m[1]+"': "+m[1]+`="`+m[2]+`"`)
	}
	for _, m := range attrRE.FindAllStringSubmatch(attrs, -1) {
		if m[1] != "duration" {
			*warnings = append(*warnings, "Command "+n+": Unknown attribute '"+m[1]+"' - known attributes are: duration")
		}
	}
}

// salvage is salvage_truncated_response: a reply cut at the output limit
// that still holds a whole <response> with its </commands>, parsed without
// error and without a "one block at a time" warning, is used as it is.
func (p xmlParser) salvage(reply string) (string, bool) {
	ce := strings.Index(reply, "</commands>")
	if ce < 0 {
		return "", false
	}
	re := strings.Index(reply[ce:], "</response>")
	if re < 0 {
		return "", false
	}
	clean := reply[:ce+re+len("</response>")]
	res, err := p.Parse(clean)
	if err != nil || res.Error != "" {
		return "", false
	}
	w := strings.ToLower(res.Warning)
	if strings.Contains(w, "only issue one") && strings.Contains(w, "block at a time") {
		return "", false
	}
	return clean, true
}
