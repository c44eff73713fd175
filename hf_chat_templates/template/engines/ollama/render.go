// Renders chat requests with a Go text/template as Ollama does (its template package: the values a template sees,
// its functions, how it collates the messages, the legacy .Prompt/.Response form), for hf_chat_templates'
// ollama engine profile. Reads one JSON request on stdin:
//
//	{"template": "...", "date": "2026-01-02", "yesterday": "2026-01-01", "jobs": [{"messages": [...], "tools": [...]}]}
//
// and writes one JSON line per job: {"text": "..."} or {"error": "...", "refused": bool}. Messages arrive in the
// OpenAI format (content a string, null, or text parts; tool_calls with dict or JSON-string arguments) and are
// turned into Ollama's messages as its OpenAI-compatible endpoint turns them. Standard library only.
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/template"
	"text/template/parse"
)

type request struct {
	Template  string `json:"template"`
	Date      string `json:"date"`
	Yesterday string `json:"yesterday"`
	Jobs      []job  `json:"jobs"`
}

type job struct {
	Messages []map[string]any `json:"messages"`
	Tools    []map[string]any `json:"tools"`
}

// The shapes Ollama hands a template (template.templateMessage, templateToolCall, templateTool).
type message struct {
	Role       string
	Content    string
	Thinking   string
	Images     []string
	ToolCalls  []toolCall
	ToolName   string
	ToolCallID string
}

type toolCall struct {
	ID       string
	Function callFunction
}

type callFunction struct {
	Index     int
	Name      string
	Arguments args
}

type args map[string]any

func (a args) String() string {
	if a == nil {
		return "{}"
	}
	b, _ := json.Marshal(map[string]any(a))
	return string(b)
}

type property struct {
	AnyOf       []property          `json:"anyOf,omitempty"`
	Type        any                 `json:"type,omitempty"`
	Items       any                 `json:"items,omitempty"`
	Description string              `json:"description,omitempty"`
	Enum        []any               `json:"enum,omitempty"`
	Properties  map[string]property `json:"properties,omitempty"`
	Required    []string            `json:"required,omitempty"`
}

type properties map[string]property

func (p properties) String() string {
	if p == nil {
		return "{}"
	}
	b, _ := json.Marshal(map[string]property(p))
	return string(b)
}

type parameters struct {
	Type       string     `json:"type"`
	Defs       any        `json:"$defs,omitempty"`
	Items      any        `json:"items,omitempty"`
	Required   []string   `json:"required,omitempty"`
	Properties properties `json:"properties"`
}

type toolFunction struct {
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Parameters  parameters `json:"parameters"`
}

type tool struct {
	Type     string       `json:"type"`
	Items    any          `json:"items,omitempty"`
	Function toolFunction `json:"function"`
}

func (t tool) String() string { b, _ := json.Marshal(t); return string(b) }

type tools []tool

func (t tools) String() string { b, _ := json.Marshal([]tool(t)); return string(b) }

func text(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// reshape re-reads a JSON value into a Go value of another type (the tool's schema into Ollama's structs).
func reshape(from any, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

func calls(m map[string]any) ([]toolCall, error) {
	list, _ := m["tool_calls"].([]any)
	var out []toolCall
	for _, raw := range list {
		c, _ := raw.(map[string]any)
		f, _ := c["function"].(map[string]any)
		var a args
		switch v := f["arguments"].(type) {
		case string:
			if err := json.Unmarshal([]byte(v), &a); err != nil {
				return nil, fmt.Errorf("ollama refuses the request: tool call arguments are not a JSON object (%v)", err)
			}
		case map[string]any:
			a = args(v)
		}
		out = append(out, toolCall{ID: text(c["id"]), Function: callFunction{Name: text(f["name"]), Arguments: a}})
	}
	return out, nil
}

// messagesOf turns OpenAI-format messages into Ollama's as its OpenAI-compatible endpoint does: text parts become
// messages of their own, a null content is allowed only beside tool calls, a tool result is named after its call.
func messagesOf(in []map[string]any) ([]message, error) {
	var out []message
	names := map[string]string{}
	for _, m := range in {
		tc, err := calls(m)
		if err != nil {
			return nil, err
		}
		for _, c := range tc {
			names[c.ID] = c.Function.Name
		}
		role := strings.ToLower(text(m["role"]))
		thinking := text(m["reasoning"]) + text(m["thinking"]) + text(m["reasoning_content"])
		name := ""
		if role == "tool" {
			name = text(m["name"])
			if name == "" {
				name = names[text(m["tool_call_id"])]
			}
		}
		base := message{Role: role, Thinking: thinking, ToolCalls: tc, ToolName: name, ToolCallID: text(m["tool_call_id"])}
		switch content := m["content"].(type) {
		case string:
			base.Content = content
			out = append(out, base)
		case []any:
			for _, raw := range content {
				part, _ := raw.(map[string]any)
				switch part["type"] {
				case "text":
					out = append(out, message{Role: role, Content: text(part["text"])})
				case "image_url":
					image, err := imageOf(part["image_url"])
					if err != nil {
						return nil, err
					}
					out = append(out, message{Role: role, Images: []string{image}})
				default:
					return nil, fmt.Errorf("ollama refuses the request: invalid message format (a %v part)", part["type"])
				}
			}
			if len(out) > 0 && len(tc) > 0 {
				last := &out[len(out)-1]
				last.ToolCalls, last.ToolName, last.ToolCallID, last.Thinking = tc, name, base.ToolCallID, thinking
			}
		default:
			if m["tool_calls"] == nil {
				return nil, fmt.Errorf("ollama refuses the request: message content is %T, not a string", content)
			}
			out = append(out, base)
		}
	}
	return out, nil
}

// imageOf reads an image_url part as Ollama's decodeImageURL does: base64 data URLs of JPEG, PNG or WebP only.
func imageOf(v any) (string, error) {
	url := text(v)
	if m, ok := v.(map[string]any); ok {
		url = text(m["url"])
	}
	if strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://") {
		return "", fmt.Errorf("ollama refuses the request: image URLs are not currently supported, please use base64 encoded data instead")
	}
	for _, prefix := range []string{"data:;base64,", "data:image/jpeg;base64,", "data:image/jpg;base64,", "data:image/png;base64,", "data:image/webp;base64,"} {
		if strings.HasPrefix(url, prefix) {
			data, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(url, prefix))
			if err != nil {
				break
			}
			return string(data), nil
		}
	}
	return "", fmt.Errorf("ollama refuses the request: invalid image input")
}

// collate joins the system messages into .System and merges consecutive messages of one role (tool results
// excepted) with a blank line, keeping the first message's other fields, as Ollama's template.collate does.
func collate(msgs []message) (string, []*message) {
	var system []string
	var out []*message
	for i := range msgs {
		if msgs[i].Role == "system" {
			system = append(system, msgs[i].Content)
		}
		if n := len(out); n > 0 && out[n-1].Role == msgs[i].Role && msgs[i].Role != "tool" {
			out[n-1].Content += "\n\n" + msgs[i].Content
		} else {
			out = append(out, &msgs[i])
		}
	}
	return strings.Join(system, "\n\n"), out
}

func identifiers(n parse.Node, into map[string]bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n != nil {
			for _, c := range n.Nodes {
				identifiers(c, into)
			}
		}
	case *parse.ActionNode:
		identifiers(n.Pipe, into)
	case *parse.TemplateNode:
		if n.Pipe != nil {
			identifiers(n.Pipe, into)
		}
	case *parse.IfNode:
		identifiers(&n.BranchNode, into)
	case *parse.RangeNode:
		identifiers(&n.BranchNode, into)
	case *parse.WithNode:
		identifiers(&n.BranchNode, into)
	case *parse.BranchNode:
		identifiers(n.Pipe, into)
		identifiers(n.List, into)
		if n.ElseList != nil {
			identifiers(n.ElseList, into)
		}
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			for _, a := range c.Args {
				identifiers(a, into)
			}
		}
	case *parse.FieldNode:
		for _, i := range n.Ident {
			into[strings.ToLower(i)] = true
		}
	case *parse.VariableNode:
		for _, i := range n.Ident {
			into[strings.ToLower(i)] = true
		}
	}
}

func parseTemplate(src string, req request) (*template.Template, map[string]bool, error) {
	funcs := template.FuncMap{
		"json":             func(v any) string { b, _ := json.Marshal(v); return string(b) },
		"currentDate":      func(...string) string { return req.Date },
		"yesterdayDate":    func(...string) string { return req.Yesterday },
		"toTypeScriptType": func(any) string { return "any" },
	}
	t, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(src)
	if err != nil {
		return nil, nil, err
	}
	vars := map[string]bool{}
	for _, tt := range t.Templates() {
		identifiers(tt.Root, vars)
	}
	if !vars["messages"] && !vars["response"] {
		// Ollama appends {{ .Response }} to a template that has neither.
		t.Tree.Root.Nodes = append(t.Tree.Root.Nodes, &parse.ActionNode{NodeType: parse.NodeAction,
			Pipe: &parse.PipeNode{NodeType: parse.NodePipe, Cmds: []*parse.CommandNode{{NodeType: parse.NodeCommand,
				Args: []parse.Node{&parse.FieldNode{NodeType: parse.NodeField, Ident: []string{"Response"}}}}}}})
	}
	return t, vars, nil
}

func toolsOf(in []map[string]any) (tools, error) {
	if in == nil {
		return nil, nil
	}
	var out tools
	if err := reshape(in, &out); err != nil {
		return nil, fmt.Errorf("ollama refuses the request: a tool is not in Ollama's shape (%v)", err)
	}
	return out, nil
}

func render(src string, req request, j job) (string, error) {
	t, vars, err := parseTemplate(src, req)
	if err != nil {
		return "", fmt.Errorf("the template does not parse: %v", err)
	}
	msgs, err := messagesOf(j.Messages)
	if err != nil {
		return "", err
	}
	ts, err := toolsOf(j.Tools)
	if err != nil {
		return "", err
	}
	system, collated := collate(msgs)
	var b bytes.Buffer
	values := map[string]any{"Response": "", "Think": false, "ThinkLevel": "", "IsThinkSet": false}
	if vars["messages"] {
		values["System"], values["Messages"], values["Tools"] = system, collated, ts
		err = t.Execute(&b, values)
		return b.String(), err
	}
	return legacy(t, collated, &b)
}

// legacy renders a template without .Messages as Ollama does: once per system/user/assistant exchange, the last
// one cut after {{ .Response }}.
func legacy(t *template.Template, msgs []*message, b *bytes.Buffer) (string, error) {
	system, prompt, response := "", "", ""
	run := func(tt *template.Template) error {
		err := tt.Execute(b, map[string]any{"System": system, "Prompt": prompt, "Response": response,
			"Think": false, "ThinkLevel": "", "IsThinkSet": false})
		system, prompt, response = "", "", ""
		return err
	}
	for _, m := range msgs {
		var err error
		switch m.Role {
		case "system":
			if prompt != "" || response != "" {
				err = run(t)
			}
			system = m.Content
		case "user":
			if response != "" {
				err = run(t)
			}
			prompt = m.Content
		case "assistant":
			response = m.Content
		}
		if err != nil {
			return b.String(), err
		}
	}
	cut := false
	root := cutAfterResponse(t.Tree.Root.Copy(), &cut).(*parse.ListNode)
	// Ollama runs the cut tree without its functions, as here.
	last, err := template.New("").AddParseTree("", &parse.Tree{Root: root})
	if err != nil {
		return b.String(), err
	}
	err = run(last)
	return b.String(), err
}

// cutAfterResponse deletes {{ .Response }} and every node after it, as Ollama's deleteNode does.
func cutAfterResponse(n parse.Node, cut *bool) parse.Node {
	if f, ok := n.(*parse.FieldNode); ok {
		for _, i := range f.Ident {
			if i == "Response" {
				*cut = true
				return nil
			}
		}
	}
	if *cut {
		return nil
	}
	switch t := n.(type) {
	case *parse.ListNode:
		var kept []parse.Node
		for _, c := range t.Nodes {
			if k := cutAfterResponse(c, cut); k != nil {
				kept = append(kept, k)
			}
		}
		t.Nodes = kept
	case *parse.IfNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.WithNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.RangeNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.ActionNode:
		if cutAfterResponse(t.Pipe, cut) == nil {
			return nil
		}
	case *parse.PipeNode:
		var cmds []*parse.CommandNode
		for _, c := range t.Cmds {
			var kept []parse.Node
			for _, a := range c.Args {
				if k := cutAfterResponse(a, cut); k != nil {
					kept = append(kept, k)
				}
			}
			if len(kept) == 0 {
				return nil
			}
			c.Args = kept
			cmds = append(cmds, c)
		}
		if len(cmds) == 0 {
			return nil
		}
		t.Cmds = cmds
	}
	return n
}

func cutBranch(b *parse.BranchNode, cut *bool) {
	b.List = cutAfterResponse(b.List, cut).(*parse.ListNode)
	if b.ElseList != nil {
		b.ElseList = cutAfterResponse(b.ElseList, cut).(*parse.ListNode)
	}
}

func main() {
	var req request
	if err := json.NewDecoder(bufio.NewReader(os.Stdin)).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "the request is not JSON:", err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	for _, j := range req.Jobs {
		rendered, err := render(req.Template, req, j)
		if err != nil {
			refused := strings.HasPrefix(err.Error(), "ollama refuses the request")
			_ = out.Encode(map[string]any{"error": err.Error(), "refused": refused})
			continue
		}
		_ = out.Encode(map[string]any{"text": rendered})
	}
}
