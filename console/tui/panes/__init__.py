"""The console's screens as components: one module per tab, owning its widgets, its loader
(a thread worker with exit_on_error=False; the app's one Worker.StateChanged handler shows a
failed load) and its nested messages."""
