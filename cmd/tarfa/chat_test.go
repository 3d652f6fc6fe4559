package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tarfa-ai/tarfa/openai"
	"github.com/tarfa-ai/tarfa/server"
)

// chatStream is a streamed chat reply as tarfa serve sends it: the role
// chunk, content chunks, the last chunk with the finish reason and the
// "tarfa" member, the usage chunk, [DONE]; each event "data: JSON\n\n".
func chatStream(t *testing.T, parts ...string) []string {
	t.Helper()
	tf := &server.Tarfa{Mode: "exact", ExpertsVerified: 7, LogitsChain: "abcdef0123456789", Routing: "0011223344556677", Attestation: "att-1"}
	str := func(s string) *string { return &s }
	stop := "stop"
	var evs []any
	evs = append(evs, openai.ChatChunk{ID: "c1", Object: "chat.completion.chunk", Model: "m",
		Choices: []openai.ChunkChoice{{Delta: openai.ChatDelta{Role: "assistant", Content: str("")}}}})
	for _, p := range parts {
		evs = append(evs, openai.ChatChunk{ID: "c1", Object: "chat.completion.chunk", Model: "m",
			Choices: []openai.ChunkChoice{{Delta: openai.ChatDelta{Content: str(p)}}}})
	}
	evs = append(evs, openai.ChatChunk{ID: "c1", Object: "chat.completion.chunk", Model: "m",
		Choices: []openai.ChunkChoice{{FinishReason: &stop}}, Tarfa: tf})
	evs = append(evs, openai.ChatChunk{ID: "c1", Object: "chat.completion.chunk", Model: "m",
		Choices: []openai.ChunkChoice{}, Usage: openai.NewUsage(11, len(parts)), Tarfa: tf})
	var out []string
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "data: "+string(b)+"\n\n")
	}
	return append(out, "data: [DONE]\n\n")
}

// fakeServer serves GET /v1/models (one model, "m") and answers POST
// /v1/chat/completions with stream (text/event-stream), recording the
// request bodies.
type fakeServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newFakeServer(t *testing.T, stream string) *fakeServer {
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "GET /v1/models":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(openai.ModelList{Object: "list", Data: []openai.Model{{ID: "m", Object: "model"}}})
		case "POST /v1/chat/completions":
			b, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			f.bodies = append(f.bodies, b)
			f.mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set(server.HeaderMode, "exact")
			io.WriteString(w, stream)
		default:
			http.Error(w, "no", http.StatusNotFound)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// TestChatStreamParsing: chat --url reads a server-sent event stream as
// the SSE format has it — CRLF line ends, comments, event/id fields, an
// event's data split over several data: lines — and prints the content,
// the token count of the usage chunk and the experts and logits chain of
// the "tarfa" member; a stream cut before [DONE], an error event and a
// reply that is not a stream are errors that say so, and the session
// goes on.
func TestChatStreamParsing(t *testing.T) {
	evs := chatStream(t, "Hel", "lo ", "world")
	// the second content chunk split over two data: lines, with a comment,
	// an event name and an id in the same event
	b, _ := strings.CutPrefix(strings.TrimSuffix(evs[2], "\n\n"), "data: ")
	i := strings.Index(b, `"choices"`)
	evs[2] = ": keep-alive\nevent: message\nid: 2\ndata: " + b[:i] + "\ndata:" + b[i:] + "\n\n"
	stream := strings.ReplaceAll(strings.Join(evs, ""), "\n", "\r\n")
	url := newFakeServer(t, stream).URL
	out, errOut, err := runCLIErr(t, "Hi\n", "chat", "--url", url)
	if err != nil {
		t.Fatal(err)
	}
	if want := "tarfa chat · EXACT mode (each reply's X-Tarfa-Mode says the precision) · model m at " + url + " · /help for commands, Ctrl-D to leave\n"; errOut != want {
		t.Errorf("banner %q, want %q", errOut, want)
	}
	if !strings.Contains(out, "Hello world\n[exact · 3 tokens · ") || !strings.Contains(out, " · 7 experts verified · logits chain abcdef012345…]") {
		t.Errorf("reply:\n%s", out)
	}

	for _, c := range []struct {
		name, stream, want string
	}{
		{"cut before [DONE]", strings.Join(chatStream(t, "Hel", "lo")[:3], ""), "error: the stream ended before its last event (data: [DONE])"},
		{"error event", chatStream(t, "Hel")[0] + `data: {"error":{"message":"the model ran out of KV cache","type":"server_error","param":null,"code":null}}` + "\n\n",
			"error: the server stopped the reply: the model ran out of KV cache"},
		{"bad event", "data: {\"choices\": 5}\n\n", "error: POST /v1/chat/completions: a bad event in the stream: json: "},
	} {
		out, _, err := runCLIErr(t, "Hi\n/stats\n", "chat", "--url", newFakeServer(t, c.stream).URL)
		if err != nil || !strings.Contains(out, c.want) || !strings.Contains(out, "mode exact · 0 replies") {
			t.Errorf("%s: %v, want %q and the session going on:\n%s", c.name, err, c.want, out)
		}
	}
}

// TestChatURLErrors: an HTTP error of the server shows its status and the
// message of its OpenAI-shaped error body (or the start of a body that is
// not one); a 401 says what to do about the API key: pass --api-key-file
// when none was given, the key in that file was refused otherwise.
func TestChatURLErrors(t *testing.T) {
	keyed, err := server.New(server.Options{ModelName: "m", APIKey: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	keyedSrv := httptest.NewServer(keyed.Handler())
	t.Cleanup(keyedSrv.Close)
	wrongKey := filepath.Join(t.TempDir(), "wrong-key")
	os.WriteFile(wrongKey, []byte("nope\n"), 0o600)
	goodKey := filepath.Join(t.TempDir(), "good-key")
	os.WriteFile(goodKey, []byte("s3cret\n"), 0o600)
	status := func(code int, ctype, body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.WriteHeader(code)
			io.WriteString(w, body)
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no key", []string{"--url", keyedSrv.URL},
			"listing the models at " + keyedSrv.URL + ": GET /v1/models: 401 Unauthorized: missing API key: send Authorization: Bearer KEY (the server wants an API key: pass --api-key-file FILE"},
		{"wrong key", []string{"--url", keyedSrv.URL, "--api-key-file", wrongKey},
			"GET /v1/models: 401 Unauthorized: incorrect API key (the server refused the key in " + wrongKey + ")"},
		// the right key: past the key, the server has no model loaded yet
		{"not ready", []string{"--url", keyedSrv.URL, "--api-key-file", goodKey},
			"GET /v1/models: 503 Service Unavailable: the model is still being verified and loaded"},
		{"server error", []string{"--url", status(500, "application/json", `{"error":{"message":"out of memory","type":"server_error","param":null,"code":null}}`)},
			"GET /v1/models: 500 Internal Server Error: out of memory"},
		{"not JSON", []string{"--url", status(502, "text/html", "<html>bad gateway</html>\n")},
			`GET /v1/models: 502 Bad Gateway: "<html>bad gateway</html>"`},
		{"no body", []string{"--url", status(404, "text/plain", "")}, "GET /v1/models: 404 Not Found"},
		{"not a model list", []string{"--url", status(200, "application/json", `[1, 2]`)}, "GET /v1/models: the reply is not the JSON wanted"},
	} {
		_, _, err := runCLIErr(t, "", append([]string{"chat"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != exitError {
			t.Errorf("%s: %v (exit %d), want %q (exit %d)", c.name, err, exitCode(err), c.want, exitError)
		}
	}

	// An HTTP error of a reply is shown the same way; the session goes on.
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" {
			json.NewEncoder(w).Encode(openai.ModelList{Data: []openai.Model{{ID: "m"}}})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		w.Write(openai.Errorf(400, "messages", "invalid_value", "messages: too long for the context").Body())
	}))
	t.Cleanup(s.Close)
	out, _, err := runCLIErr(t, "Hi\n", "chat", "--url", s.URL)
	if err != nil || !strings.Contains(out, "error: POST /v1/chat/completions: 400 Bad Request: messages: too long for the context\n") {
		t.Errorf("%v:\n%s", err, out)
	}
}

// TestChatMatchesOpenAIGo holds chat's client to github.com/openai/openai-go,
// the client it used before (and the oracle here): for the same turns and
// flags it sends the same request body, which the server's parser
// accepts; and from the same stream it reads the same text, usage and
// "tarfa" member that openai-go reads.
func TestChatMatchesOpenAIGo(t *testing.T) {
	stream := strings.Join(chatStream(t, "Hel", "lo ", "wor", "ld"), "")
	for _, c := range []struct {
		name   string
		args   []string
		params oai.ChatCompletionNewParams
	}{
		{"greedy", nil, oai.ChatCompletionNewParams{Temperature: oai.Float(0)}},
		{"sampled, max tokens, system", []string{"--temperature", "0.7", "--seed", "5", "--max-tokens", "9", "--system", "Be brief"},
			oai.ChatCompletionNewParams{Temperature: oai.Float(0.7), Seed: oai.Int(5), MaxTokens: oai.Int(9)}},
	} {
		f := newFakeServer(t, stream)
		out, _, err := runCLIErr(t, "One\nTwo\n", append([]string{"chat", "--url", f.URL}, c.args...)...)
		if err != nil || strings.Count(out, "[exact · 4 tokens · ") != 2 {
			t.Fatalf("%s: %v:\n%s", c.name, err, out)
		}
		// openai-go's request for the second turn
		p := c.params
		p.Model = "m"
		p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
		if strings.Contains(c.name, "system") {
			p.Messages = append(p.Messages, oai.SystemMessage("Be brief"))
		}
		p.Messages = append(p.Messages, oai.UserMessage("One"), oai.AssistantMessage("Hello world"), oai.UserMessage("Two"))
		client := oai.NewClient(option.WithBaseURL(f.URL+"/v1/"), option.WithMaxRetries(0), option.WithAPIKey("none"))
		st := client.Chat.Completions.NewStreaming(context.Background(), p)
		var text strings.Builder
		var usage oai.CompletionUsage
		var tf server.Tarfa
		for st.Next() {
			ch := st.Current()
			for _, c := range ch.Choices {
				text.WriteString(c.Delta.Content)
			}
			if ch.Usage.TotalTokens > 0 {
				usage = ch.Usage
			}
			if raw, ok := ch.JSON.ExtraFields["tarfa"]; ok {
				if err := json.Unmarshal([]byte(raw.Raw()), &tf); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if len(f.bodies) != 3 {
			t.Fatalf("%s: %d requests", c.name, len(f.bodies))
		}
		var ours, theirs map[string]any
		json.Unmarshal(f.bodies[1], &ours)
		json.Unmarshal(f.bodies[2], &theirs)
		if !reflect.DeepEqual(ours, theirs) {
			t.Errorf("%s: chat sent\n%s\nopenai-go sent\n%s", c.name, f.bodies[1], f.bodies[2])
		}
		if _, e := openai.ParseChat(f.bodies[1]); e != nil {
			t.Errorf("%s: the server refuses chat's request: %v\n%s", c.name, e, f.bodies[1])
		}
		want := "Hello world\n[exact · " + strconv.Itoa(int(usage.CompletionTokens)) + " tokens · "
		if text.String() != "Hello world" || !strings.Contains(out, want) ||
			!strings.Contains(out, " · "+strconv.Itoa(tf.ExpertsVerified)+" experts verified · logits chain "+short(tf.LogitsChain)+"…]") {
			t.Errorf("%s: openai-go read %q, usage %+v, tarfa %+v; chat printed:\n%s", c.name, text.String(), usage, tf, out)
		}
	}
}
