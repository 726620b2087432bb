# Sourced by up.sh (and by tests/airflow/test_private_files.py): what holds a secret or a command
# line is readable by its owner only. Airflow's simple auth manager opens its generated password
# file with "a+", which keeps the mode of a file that already exists: it is created 0600 before
# Airflow starts, and one an older run left readable is fixed. AIRFLOW_HOME also holds airflow.cfg
# (secret keys) and the metadata DB (connections); logs and control/ hold command lines.
secure_private_files() {  # WEIR_HOME AIRFLOW_HOME
  local weir_home="$1" airflow_home="$2" folder
  local passwords="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-$airflow_home/simple_auth_manager_passwords.json.generated}"
  for folder in "$airflow_home" "$weir_home/logs" "$weir_home/control"; do
    mkdir -p "$folder" && chmod 700 "$folder"
  done
  mkdir -p "$(dirname "$passwords")"
  [ -e "$passwords" ] || (umask 077 && : >"$passwords")
  chmod 600 "$passwords"
  find "$weir_home/logs" "$weir_home/control" -type f -exec chmod 600 {} +
  find "$weir_home/control" -mindepth 1 -type d -exec chmod 700 {} +
}
