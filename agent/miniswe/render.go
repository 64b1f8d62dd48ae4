package miniswe

import (
	"embed"
	"strconv"
	"strings"

	"github.com/proctor-dev/proctor/agent/pystr"
)

//go:embed templates/system.j2 templates/instance.j2
var templates embed.FS

// jinja renders a template whose only variable is {{task}}: Jinja2, by
// default, drops the template's one trailing newline.
func jinja(name, task string) string {
	b, _ := templates.ReadFile("templates/" + name)
	t := strings.TrimSuffix(string(b), "\n")
	return strings.Replace(t, "{{task}}", task, 1)
}

// System is the first message (agent.system_template).
func System() string { return jinja("system.j2", "") }

// Instance is the second message, the task in its instructions
// (agent.instance_template).
func Instance(task string) string { return jinja("instance.j2", task) }

// output is what one command did, as DockerEnvironment.execute returns
// it.
type output struct {
	Output        string
	ReturnCode    int
	ExceptionInfo string
}

// tooLong is the observation template's note for an output of 10,000
// characters or more.
const tooLong = `<warning>
The output of your last command was too long.
Please try a different command that produces less output.
If you're looking at a file you can try use head, tail or sed to view a smaller number of lines selectively.
If you're using grep or find and it produced too much output, you can use a more selective search pattern.
If you really need to see something from the full command's output, you can redirect output to a file and then search in that file.
</warning>`

// observation renders swebench.yaml's model.observation_template, as
// Jinja2 renders it (its whitespace control included): the exception, the
// return code, and the output, or past 10,000 characters its first and
// last 5,000 around a note. chars is the output's length when the sandbox
// did not bring all of it back (-1 otherwise).
func observation(o output, chars int, head, tail string) string {
	var b strings.Builder
	if o.ExceptionInfo != "" {
		b.WriteString("<exception>" + o.ExceptionInfo + "</exception>\n")
	}
	b.WriteString("<returncode>" + strconv.Itoa(o.ReturnCode) + "</returncode>\n")
	if chars < 0 {
		chars, head, tail = pystr.Len(o.Output), o.Output, o.Output
	}
	if chars < 10000 {
		b.WriteString("<output>\n" + o.Output + "</output>")
		return b.String()
	}
	b.WriteString(tooLong)
	b.WriteString("<output_head>\n" + pystr.Head(head, 5000) + "\n</output_head>\n<elided_chars>\n" +
		strconv.Itoa(chars-10000) + " characters elided\n</elided_chars>\n<output_tail>\n" + pystr.Tail(tail, 5000) + "\n</output_tail>")
	return b.String()
}

// formatError renders swebench.yaml's model.format_error_template: a
// reply cut at the output limit before its tool call gets its own
// message, any other mistake the error and the guidance.
func formatError(msg, finish string, hasToolCalls bool) string {
	if finish == "length" || finish == "tool_calls" && !hasToolCalls {
		return "Your previous response reached the output token limit (finish_reason=" + finish + ") before you produced a tool call, so it was cut off. Respond more concisely and finish with exactly one bash tool call. If you need to think more, do so briefly."
	}
	return `Tool call error:

<error>
` + msg + `
</error>

Here is general guidance on how to submit correct toolcalls:

Every response needs to use the 'bash' tool at least once to execute commands.

Call the bash tool with your command as the argument:
- Tool: bash
- Arguments: {"command": "your_command_here"}

If you have completed your assignment, please consult the first message about how to
submit your solution (you will not be able to continue working on this task after that).`
}
