// The built-in task: Chinese numerals → English words, for 0..99,999,999.
//
// Chinese follows the standard (school) reading: groups of four digits under 万; one 零 for
// each run of zeros inside a group and for a 个-group under 1000 after a 万-group; no 零 for
// zeros at the end of a group (10,005 一万零五; 100,500 十万零五百; 10,050,000 一千零五万;
// 10,001,000 一千万一千); 十 without 一 only as the number's first digit (10 十, 110 一百一十,
// 100,010 十万零一十); 两 may replace 二 for a 2 directly before 千 or as the whole group
// before 万 (两千, 两万, 一万两千; but 二百, 十二万).
// English is American without "and": "one hundred", hyphenated tens ("forty-two").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tgc::data {

inline constexpr int64_t kMaxNumeral = 99'999'999;
inline constexpr int kMaxNumeralDigits = 8;

// `liang`: write 两 instead of 二 where both are standard. n in [0, kMaxNumeral].
std::string chineseNumeral(int64_t n, bool liang = false);
std::string englishNumber(int64_t n);
// Decimal digits of n (0 has one).
int numeralDigits(int64_t n);

struct NumeralExample {
  int64_t number = 0;
  std::string zh;  // source
  std::string en;  // target: words separated by single spaces
};

struct NumeralsOptions {
  uint64_t seed = 1;
  int64_t trainSize = 100'000;
  int64_t validSize = 1'000;
  int64_t testSize = 1'000;
  // At most this fraction of the numbers of each digit length is held out (valid + test),
  // so short numbers stay learnable: of 0..9 only one is held out, of 10..99 nine.
  double maxHeldOutFraction = 0.1;
};

// train: numbers drawn uniformly over digit length 1..8, then uniformly within it (small
// numbers repeat). valid and test: distinct numbers, spread as evenly over digit lengths as
// the cap allows, never in train nor in each other. The 两/二 variant is drawn per example.
// The held-out sets depend only on (seed, validSize, testSize, maxHeldOutFraction), the
// training examples on all options; everything is the same for the same options.
struct NumeralsSplits {
  std::vector<NumeralExample> train, valid, test;
};

NumeralsSplits makeNumeralsTask(const NumeralsOptions& options);

NumeralExample numeralExample(int64_t n, bool liang);

}  // namespace tgc::data
