"""The schedule half of the service layer: create, read, list, update, pause, resume, delete.

Every write validates first and computes ``next_run`` before anything reaches the database, so
bad input never leaves a row behind. ``next_run`` is always recomputed from *now* when the
timetable or the enabled state changes, which is why a due time missed while paused is never
run late.

- ``views``: ids, the one owner-visible loader, the public shape of a schedule;
- ``plans``: pure previews and resume/backfill plans;
- ``variables``: the warning for a service variable a runner or channel names that is unset;
- ``context``: ``ScheduleContext``, what the parts share (database, clock, policy, data
  directory, wake-up) and the rule of the active-schedule limit;
- ``crud``: create, read, list, update, delete;
- ``timetable``: pause, resume, backfill, skip;
- ``keyed``: apply, reconcile, get and delete by the host's own key;
- ``service``: ``ScheduleService``, which composes the three parts and offers their verbs.

Callers import each name from the module that defines it.
"""
