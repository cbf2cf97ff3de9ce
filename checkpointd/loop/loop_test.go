package loop

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A pass runs at once, again when woken (long before the interval), and the
// loop ends with the pass's error.
func TestEveryWakesAndEnds(t *testing.T) {
	wake := make(chan struct{})
	passes := make(chan int, 10)
	n := 0
	stop := errors.New("the part has ended")
	done := make(chan error, 1)
	go func() {
		done <- Every(context.Background(), time.Hour, wake, func() error {
			n++
			passes <- n
			if n == 3 {
				return stop
			}
			return nil
		})
	}()
	for want := 1; want <= 3; want++ {
		select {
		case got := <-passes:
			if got != want {
				t.Fatalf("pass %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("pass %d did not run: the wake was not heard", want)
		}
		if want < 3 {
			wake <- struct{}{}
		}
	}
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("Every returned %v, want the pass's error", err)
	}
}

// Every runs on the interval without a wake, and returns nil when ctx ends.
func TestEveryTicksUntilDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	passes := make(chan struct{}, 10)
	done := make(chan error, 1)
	go func() {
		done <- Every(ctx, 10*time.Millisecond, nil, func() error { passes <- struct{}{}; return nil })
	}()
	for i := 0; i < 3; i++ {
		select {
		case <-passes:
		case <-time.After(10 * time.Second):
			t.Fatalf("pass %d did not run on the interval", i+1)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Every returned %v when ctx ended, want nil", err)
	}
}

// A failure is worth a line when it is new for its key; recovery is worth
// one only after a failure, and the same failure is new again after it.
func TestOnce(t *testing.T) {
	var o Once
	steps := []struct {
		key, msg string
		recover  bool
		want     bool
	}{
		{key: "write", msg: "refused", want: true},
		{key: "write", msg: "refused", want: false},
		{key: "read", msg: "refused", want: true},
		{key: "write", msg: "timeout", want: true},
		{key: "write", recover: true, want: true},
		{key: "write", recover: true, want: false},
		{key: "write", msg: "timeout", want: true},
		{key: "read", msg: "refused", want: false},
	}
	for i, s := range steps {
		var got bool
		if s.recover {
			got = o.Recovered(s.key)
		} else {
			got = o.Failed(s.key, s.msg)
		}
		if got != s.want {
			t.Errorf("step %d (%s %q recover=%v): %v, want %v", i, s.key, s.msg, s.recover, got, s.want)
		}
	}
}
