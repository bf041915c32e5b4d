package ff

// The canonical state alphabets (one per state column). ffriver writes only
// these literals; readers also accept the legacy upstream phase "cancelled"
// as terminal.
const (
	PhaseSubmitted = "submitted"
	PhaseRunnable  = "runnable"
	PhaseActive    = "active"
	PhaseSuspended = "suspended"
	PhaseTerminal  = "terminal"
	// PhaseLegacyCancelled is written by upstream producers; read as terminal.
	PhaseLegacyCancelled = "cancelled"

	OwnershipUnowned     = "unowned"
	OwnershipLeased      = "leased"
	OwnershipRevoked     = "lease_revoked"
	OwnershipReclaimable = "lease_expired_reclaimable"

	EligibleNow               = "eligible_now"
	EligibleNotUntilTime      = "not_eligible_until_time"
	EligibleBlockedByDeps     = "blocked_by_dependencies"
	EligibleBlockedByOperator = "blocked_by_operator"
	EligibleNotApplicable     = "not_applicable"

	AttemptNone           = "none"
	AttemptPendingFirst   = "pending_first_attempt"
	AttemptRunning        = "running_attempt"
	AttemptInterrupted    = "attempt_interrupted"
	AttemptPendingRetry   = "pending_retry_attempt"
	AttemptTerminal       = "attempt_terminal"
	PublicWaiting         = "waiting"
	PublicDelayed         = "delayed"
	PublicWaitingChildren = "waiting_children"
	PublicActive          = "active"
	PublicCompleted       = "completed"
	PublicFailed          = "failed"
	PublicCancelled       = "cancelled"
	PublicExpired         = "expired"
	PublicSkipped         = "skipped"
)

// Lease event types (ff_lease_event.event_type).
const (
	LeaseAcquired  = "acquired"
	LeaseRenewed   = "renewed"
	LeaseExpired   = "expired"
	LeaseReclaimed = "reclaimed"
	LeaseRevoked   = "revoked"
)

// Completion outcomes (ff_completion_event.outcome).
const (
	OutcomeSuccess   = "success"
	OutcomeFailed    = "failed"
	OutcomeExpired   = "expired"
	OutcomeCancelled = "cancelled"
	OutcomeSkipped   = "skipped"
)

// IsTerminalPhase reports whether a lifecycle_phase value is terminal,
// accepting the legacy "cancelled" phase.
func IsTerminalPhase(phase string) bool {
	return phase == PhaseTerminal || phase == PhaseLegacyCancelled
}
