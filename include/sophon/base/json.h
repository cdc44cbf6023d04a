// The one JSON writer of the project (reports of sophon-train and
// sophon-plan). Builds a document in memory; strings are escaped, non-finite
// numbers become null. Not thread-safe.
//
//   JsonWriter w;
//   w.BeginObject().Key("mode").String("nooff").Key("epochs").BeginArray();
//   ... w.EndArray().EndObject();
//   std::string text = w.Take();
#ifndef SOPHON_BASE_JSON_H_
#define SOPHON_BASE_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace sophon {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next value. REQUIRES: inside an object.
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Bool(bool value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  // %.6g, or null when not finite.
  JsonWriter& Number(double value);
  // Fixed-point with `digits` decimals, or null when not finite.
  JsonWriter& Fixed(double value, int digits);
  // The document, ending in a newline; the writer is empty afterwards.
  std::string Take();

 private:
  // Writes the comma before a value that is not the first of its container.
  void Separate();
  JsonWriter& Open(char c);
  JsonWriter& Close(char c);

  std::string out_;
  std::vector<bool> has_items_;  // per open container
  bool after_key_ = false;
};

// `value` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view value);

}  // namespace sophon

#endif  // SOPHON_BASE_JSON_H_
