// Command-line helpers shared by the programs.
#ifndef SOPHON_CLI_H_
#define SOPHON_CLI_H_

#include <string>
#include <vector>

namespace sophon {

// Abseil flags are spelled with underscores; Sophon documents them with dashes
// (--prep-workers). Returns argv with dashes in flag names (not in values)
// turned into underscores, stopping at a bare "--".
std::vector<std::string> NormalizeFlagNames(int argc, char** argv);

// Sets the usage text and makes --help list every Sophon flag (Abseil's
// default shows only flags defined in a file named like the program).
void InitUsage(const char* usage);

// Keeps the strings alive and exposes them as a char* array for ParseCommandLine.
class ArgvHolder {
 public:
  ArgvHolder(int argc, char** argv);
  int argc() const { return static_cast<int>(pointers_.size()) - 1; }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> pointers_;
};

}  // namespace sophon

#endif  // SOPHON_CLI_H_
