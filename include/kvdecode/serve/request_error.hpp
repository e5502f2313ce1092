// RequestError: a request the server refuses, with the HTTP status and the
// OpenAI-style error object it becomes. Every refusal the serving code makes
// (a malformed body, a field of the wrong type or out of range, a prompt longer
// than the context, a wrong API key, a full queue) is one RequestError whose
// message names the field, the value and the limit; error_json() gives the body
// OpenAI's API answers with:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": "..."}}
// The status says what the client should do: 400 fix the request, 401 send the
// key, 413 send less, 503 retry later.
#pragma once

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "kvdecode/error.hpp"

namespace kvd {

/// A request refused by the server: HTTP status, OpenAI error type, the field at
/// fault ("" when the whole request is) and a short machine-readable code.
class RequestError : public Error {
 public:
  RequestError(int status, std::string type, std::string param, std::string code, const std::string& message)
      : Error(message), status_(status), type_(std::move(type)), param_(std::move(param)), code_(std::move(code)) {}

  int status() const { return status_; }             ///< 400, 401, 404, 413, 503, ...
  const std::string& type() const { return type_; }  ///< "invalid_request_error", "authentication_error", ...
  const std::string& param() const { return param_; }  ///< the JSON field at fault, "" for none
  const std::string& code() const { return code_; }  ///< e.g. "invalid_type", "context_length_exceeded"

 private:
  int status_;
  std::string type_, param_, code_;
};

/// A 400 for field `param`: "invalid_request_error" with `code`. Never throws beyond bad_alloc.
inline RequestError bad_request(const std::string& param, const std::string& code, const std::string& message) {
  return RequestError(400, "invalid_request_error", param, code, message);
}

/// The OpenAI error body for `status`, `type`, `message`, `param` and `code`
/// (param and code are null when empty). Never throws beyond bad_alloc.
inline nlohmann::json error_json(const std::string& type, const std::string& message, const std::string& param = "",
                                 const std::string& code = "") {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", std::move(e)}};
}

/// The OpenAI error body of a RequestError. Never throws beyond bad_alloc.
inline nlohmann::json error_json(const RequestError& e) { return error_json(e.type(), e.what(), e.param(), e.code()); }

}  // namespace kvd
