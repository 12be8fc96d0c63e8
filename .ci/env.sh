# Environment that keeps Prefect, MLflow and GX quiet, offline and inside the project
# (../shared/ECOSYSTEM.md, "Recommended environment"). Sourced by .ci/setup.
export PREFECT_HOME="${PREFECT_HOME:-$PWD/.prefect}"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export DO_NOT_TRACK=true
export MLFLOW_DISABLE_TELEMETRY=true
export MLFLOW_LOGGING_LEVEL=WARNING          # no "INFO mlflow...: Creating initial MLflow database tables"
export PREFECT_SERVER_LOGGING_LEVEL=CRITICAL
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90
export PREFECT_LOGGING_LEVEL=WARNING
# ... but the runs' own INFO lines (get_run_logger) reach the API, so flow-run pages show them;
# the console handler keeps the terminal at WARNING
export PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL=INFO
export PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL=INFO
export PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL=WARNING
export MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT=true   # no "View run ... at:" per ended run
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
export MPLBACKEND=Agg
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false
