// The gate's report: the table an operator reads, or one JSON object (docs/server-gate.md,
// "Reading the report"), from the host checks and one record per attack run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gate/attacks.hpp"
#include "gate/host_checks.hpp"

namespace motor::gate {

struct AttackRecord {
  std::string id, control, description, needs;
  Verdict verdict;
};

struct Summary {
  int stopped = 0, got_through = 0, skipped = 0, skipped_not_host = 0, inconclusive = 0, checks_failed = 0;
  size_t attacks_run = 0, attacks_known = 0;
  std::vector<std::string> weakened;  // test build only: controls its runner ran without
  std::string line() const;
  // A runner with a weakened control never passes, whatever the attacks saw.
  bool passed() const {
    return got_through == 0 && inconclusive == 0 && skipped_not_host == 0 && checks_failed == 0 && weakened.empty();
  }
};

Summary summarize(const std::vector<HostCheck>& checks, const std::vector<AttackRecord>& records, size_t attacks_known,
                  std::vector<std::string> weakened);

struct Report {
  const std::vector<HostCheck>& checks;
  const std::vector<AttackRecord>& attacks;
  const Summary& summary;
  const std::string& config_origin;
  const std::string& jobs_through;        // the transport's name, or "" (exec.run on the gate's session)
  const std::string& fatal;               // why the attacks could not run at all, or ""
  const std::vector<std::string>& notes;  // what the clean-up had to do by force
};

void print_table(const Report& report);
void print_json(const Report& report);

}  // namespace motor::gate
