package controllers

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Reasons of the Events the IngressProblemReporter sends.
const (
	// EventReasonIngressProblem is a Warning naming one problem newly found
	// in an Ingress.
	EventReasonIngressProblem = "IngressProblem"
	// EventReasonIngressProblemsResolved is a Normal event sent when an
	// Ingress that had problems has none left.
	EventReasonIngressProblemsResolved = "IngressProblemsResolved"
)

const (
	defaultEventComponent = "meshpilot"
	// eventRetryDelay spaces out attempts to send Events whose Ingress
	// could not be read.
	eventRetryDelay = 2 * time.Second
	// maxEventMessage keeps a message within what the events.k8s.io API
	// accepts for a note.
	maxEventMessage = 1024
)

// IngressProblemOptions configures an IngressProblemReporter.
type IngressProblemOptions struct {
	// Client reads the Ingresses that Events are about (their UID makes
	// `kubectl describe ingress` show the Events) and, unless Recorder is
	// set, sends the Events (core/v1 events: create, patch). Without one
	// (Ingresses read from a directory, with no API server to tell) the
	// reporter only logs and counts, and Run returns at once.
	Client kubernetes.Interface
	// Recorder, if set, receives the Events instead of the API server.
	Recorder record.EventRecorder
	// Component is the Events' source component; "meshpilot" when empty.
	Component string
	Logger    *slog.Logger
	// Metrics may be shared; nil creates unregistered ones.
	Metrics *IngressStatusMetrics
}

// IngressProblemReporter tells users what is wrong with their Ingresses.
// Report is called with every new push context's problems; for each
// Ingress whose list changed it logs the list and sets the
// meshpilot_ingress_problems gauge, on every replica. Only Run, which runs
// on the leader, sends Kubernetes Events: a Warning per newly found
// problem, and a Normal event once an Ingress has no problems left. Events
// from every replica would repeat each other.
//
// A replica that becomes leader announces the problems present at that
// moment, since it cannot know which ones its predecessor announced; a
// replica that leads again does not repeat what it already sent.
type IngressProblemReporter struct {
	opts    IngressProblemOptions
	log     *slog.Logger
	metrics *IngressStatusMetrics
	wake    chan struct{}

	mu     sync.Mutex
	latest map[model.NamespacedName][]string

	// emitted is what Events have announced, per Ingress. Only Run reads
	// and writes it, and only one Run is active at a time.
	emitted map[model.NamespacedName][]string
}

// NewIngressProblemReporter checks the options and returns a reporter.
func NewIngressProblemReporter(opts IngressProblemOptions) (*IngressProblemReporter, error) {
	if opts.Client == nil && opts.Recorder != nil {
		return nil, errors.New("ingress problems: a Recorder needs a Client to read the Ingresses")
	}
	opts.Component = cmp.Or(opts.Component, defaultEventComponent)
	r := &IngressProblemReporter{
		opts:    opts,
		log:     cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With("component", "ingress-problems"),
		metrics: opts.Metrics,
		wake:    make(chan struct{}, 1),
		emitted: map[model.NamespacedName][]string{},
	}
	if r.metrics == nil {
		r.metrics = NewIngressStatusMetrics(nil)
	}
	return r, nil
}

// Report takes the problems of every owned Ingress, each list sorted, as
// the push context computed them; Ingresses without problems may be absent
// or have an empty list. The map must not change afterwards. Report does
// not block: Events are sent by Run.
func (r *IngressProblemReporter) Report(problems map[model.NamespacedName][]string) {
	// Held throughout so that overlapping calls log and count each change
	// once; Run only takes it to read latest.
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.latest
	r.latest = problems

	// This runs after every push context build: an unchanged report must
	// cost no more than the comparison.
	changed := false
	for key, list := range problems {
		if slices.Equal(prev[key], list) {
			continue
		}
		changed = true
		if len(list) > 0 {
			r.metrics.IngressProblems.WithLabelValues(key.Namespace, key.Name).Set(float64(len(list)))
			r.log.Warn("ingress has problems", "ingress", key.String(), "problems", list)
		}
	}
	for key, list := range prev {
		if len(list) > 0 && len(problems[key]) == 0 {
			changed = true
			r.metrics.IngressProblems.DeleteLabelValues(key.Namespace, key.Name)
			r.log.Info("ingress problems resolved", "ingress", key.String())
		}
	}
	if !changed {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run sends Events for problem changes until ctx is done. Run it only on
// the leader. Without a Client there is nowhere to send them: it returns.
func (r *IngressProblemReporter) Run(ctx context.Context) {
	if r.opts.Client == nil {
		return
	}
	recorder := r.opts.Recorder
	if recorder == nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.opts.Client.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: r.opts.Component})
	}
	var retry <-chan time.Time
	for {
		if r.sendEvents(ctx, recorder) {
			retry = time.After(eventRetryDelay)
		} else {
			retry = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-retry:
		}
	}
}

// sendEvents announces every difference between the latest report and
// what was announced. It returns true if some Ingress could not be read
// and should be tried again.
func (r *IngressProblemReporter) sendEvents(ctx context.Context, recorder record.EventRecorder) (retry bool) {
	r.mu.Lock()
	latest := r.latest
	r.mu.Unlock()

	keys := slices.AppendSeq(slices.Collect(maps.Keys(latest)), maps.Keys(r.emitted))
	slices.SortFunc(keys, compareIngressNames)
	for _, key := range slices.Compact(keys) {
		want, had := latest[key], r.emitted[key]
		if slices.Equal(want, had) {
			continue
		}
		added := slices.DeleteFunc(slices.Clone(want), func(p string) bool { return slices.Contains(had, p) })
		resolved := len(want) == 0
		if len(added) > 0 || resolved {
			ing, err := r.opts.Client.NetworkingV1().Ingresses(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				// Gone: there is nothing to attach an Event to.
			case err != nil:
				if ctx.Err() == nil {
					r.log.Warn("cannot read ingress to report its problems; will retry",
						"ingress", key.String(), "error", err)
				}
				retry = true
				continue
			case resolved:
				r.metrics.ProblemEvents.WithLabelValues(corev1.EventTypeNormal).Inc()
				recorder.Event(ing, corev1.EventTypeNormal, EventReasonIngressProblemsResolved,
					"meshpilot found no problems left in this Ingress")
			default:
				for _, p := range added {
					r.metrics.ProblemEvents.WithLabelValues(corev1.EventTypeWarning).Inc()
					recorder.Event(ing, corev1.EventTypeWarning, EventReasonIngressProblem, truncateMessage(p))
				}
			}
		}
		if len(want) == 0 {
			delete(r.emitted, key)
		} else {
			r.emitted[key] = want
		}
	}
	return retry
}

func compareIngressNames(a, b model.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

func truncateMessage(s string) string {
	if len(s) <= maxEventMessage {
		return s
	}
	cut := maxEventMessage - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
