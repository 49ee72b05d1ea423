"""The ``command`` runner: an argv run in the task's working directory, prompt on stdin.

Exit 0 succeeds; 75 (EX_TEMPFAIL) is transient; any other exit code is permanent; death by a
signal the engine did not send is transient. The child gets its own process group so a timeout
or cancel reaches every process it started (SIGTERM, then SIGKILL after a grace period; SIGKILL
at once when the engine is losing the run's lease, ``CancelToken.at_once``). While the engine
cannot confirm the run's lease the group is frozen with SIGSTOP, and thawed with SIGCONT once
it can (``CancelToken.suspend``/``resume``).

The process never sees the service's environment: it gets ``agent_environment`` (PATH, HOME =
its working directory, locale, TZ, a TMPDIR of its own, the variables the operator passes
through with ``AGENTCRON_AGENT_ENV``), the run's metadata (``run_metadata``) and the runner
config's ``env``. With the operator's sandbox (``RunRequest.containment.sandbox``) it runs
inside bubblewrap (``core.runners.containment.Sandbox``). bwrap's ``--new-session`` puts the
agent in a process group of the sandbox's own, which the runner learns from bwrap's info
(``child-pid``): SIGSTOP, SIGCONT and SIGKILL go to both groups, SIGTERM only to the agent's,
since bwrap would die of it and take the agent with it at once, without its grace period.
A sandboxed agent killed by a signal makes bwrap exit with 128 + the signal's number, which is
read as death by that signal.

No agent outlives the service, however it dies: every agent is started through a gate that
waits until its group is registered with the service's reaper process, which SIGKILLs every
registered group when the service's end of its pipe closes (``reaper``).

- ``config``: ``CommandRunnerType``, the runner's configuration validated and built;
- ``runner``: ``CommandRunner``, one attempt: environment, start, stop, exit status;
- ``process``: the started process's signals, suspension, exit and output tails;
- ``reaper``: the per-service reaper and the gate every agent starts through;
- ``preflight``: the warnings a saved runner gets for a program or script not found.
"""
