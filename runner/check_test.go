package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/engine"
)

// TestSchedulerCheck: a request that can never run and options out of
// range are refused with errors naming what is wrong; a request at the
// limits is accepted.
func TestSchedulerCheck(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct {
		opt  SchedOptions
		want string
	}{
		{SchedOptions{MaxBatch: -1}, "MaxBatch -1"},
		{SchedOptions{MaxQueue: -1}, "MaxQueue -1"},
		{SchedOptions{StateBudget: -1}, "StateBudget -1"},
		{SchedOptions{PrefillChunk: -1}, "PrefillChunk -1"},
		{SchedOptions{MaxBatch: 8, StepRows: 7}, "StepRows 7"},
	} {
		if s, err := NewScheduler(r, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			if s != nil {
				s.Close()
			}
			t.Errorf("options %+v: %v, want an error naming %s", c.opt, err, c.want)
		}
	}
	s, err := NewScheduler(r, SchedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := r.Config.Vocab
	long := make([]int, r.ContextLimit())
	for _, c := range []struct {
		req  Request
		want string
	}{
		{Request{Gen: engine.GenOptions{MaxTokens: 1}}, "empty"},
		{Request{Prompt: []int{1}, Gen: engine.GenOptions{MaxTokens: 1}, TopLogprobs: MaxTopLogprobs + 1}, "top_logprobs"},
		{Request{Prompt: []int{1}, Gen: engine.GenOptions{MaxTokens: 1}, TopLogprobs: -1}, "top_logprobs"},
		{Request{Prompt: []int{1}}, "max_tokens 0"},
		{Request{Prompt: []int{1, v}, Gen: engine.GenOptions{MaxTokens: 1}}, "prompt token 1 is id"},
		{Request{Prompt: []int{-1}, Gen: engine.GenOptions{MaxTokens: 1}}, "prompt token 0 is id -1"},
		{Request{Prompt: long, Gen: engine.GenOptions{MaxTokens: 2}}, "do not fit"},
	} {
		if err := s.Check(&c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("request of %d tokens, %+v: %v, want an error naming %s", len(c.req.Prompt), c.req.Gen, err, c.want)
		}
	}
	for _, req := range []Request{
		{Prompt: []int{v - 1}, Gen: engine.GenOptions{MaxTokens: 1}, TopLogprobs: MaxTopLogprobs},
		{Prompt: long, Gen: engine.GenOptions{MaxTokens: 1}},
	} {
		if err := s.Check(&req); err != nil {
			t.Errorf("request of %d tokens at the limits: %v", len(req.Prompt), err)
		}
	}
}
