#include "sophon/base/json.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sophon {

std::string JsonQuote(absl::string_view value) {
  std::string out = "\"";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out + "\"";
}

void JsonWriter::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_items_.empty()) {
    if (has_items_.back()) out_ += ", ";
    has_items_.back() = true;
  }
}

JsonWriter& JsonWriter::Open(char c) {
  Separate();
  out_.push_back(c);
  has_items_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::Close(char c) {
  out_.push_back(c);
  if (!has_items_.empty()) has_items_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::BeginObject() { return Open('{'); }
JsonWriter& JsonWriter::EndObject() { return Close('}'); }
JsonWriter& JsonWriter::BeginArray() { return Open('['); }
JsonWriter& JsonWriter::EndArray() { return Close(']'); }

JsonWriter& JsonWriter::Key(absl::string_view key) {
  Separate();
  absl::StrAppend(&out_, JsonQuote(key), ": ");
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(absl::string_view value) {
  Separate();
  out_ += JsonQuote(value);
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  Separate();
  out_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  Separate();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Uint(uint64_t value) {
  Separate();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Number(double value) {
  Separate();
  out_ += std::isfinite(value) ? absl::StrFormat("%.6g", value) : std::string("null");
  return *this;
}

JsonWriter& JsonWriter::Fixed(double value, int digits) {
  Separate();
  out_ += std::isfinite(value) ? absl::StrFormat("%.*f", digits, value) : std::string("null");
  return *this;
}

std::string JsonWriter::Take() {
  std::string out = std::move(out_);
  out_.clear();
  has_items_.clear();
  after_key_ = false;
  return out + "\n";
}

}  // namespace sophon
