"""render: env files, compose, Ansible, LiteLLM and Prometheus files from a saved plan; diff, apply, rollback."""
