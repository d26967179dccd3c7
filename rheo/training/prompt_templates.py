"""The vocabulary of the templated training prompts (:mod:`rheo.training.prompts`).

Topics, small coding tasks, names, countries, elements, animals and the templates each
prompt kind is filled from; :mod:`rheo.training.prompts` combines them into prompts.
"""

from __future__ import annotations

# ----------------------------------------------------------------------------- chat
TOPICS = (
    "photosynthesis, black holes, the water cycle, volcanoes, climate change, renewable energy, electric cars, "
    "the Roman Empire, the printing press, the Silk Road, ancient Egypt, the Renaissance, jazz music, "
    "classical music, impressionist painting, chess, marathon running, yoga, meditation, healthy sleep, "
    "vegetarian cooking, baking bread, coffee, tea ceremonies, gardening, beekeeping, bird watching, "
    "urban planning, public libraries, remote work, time management, job interviews, public speaking, "
    "learning a new language, saving money, starting a small business, online privacy, password security, "
    "machine learning, quantum computing, the internet, smartphones, social media, video games, "
    "space exploration, the Moon landing, Mars, ocean tides, coral reefs, rainforests, deserts, "
    "honeybees, dolphins, elephants, penguins, friendship, kindness, leadership, teamwork, "
    "camping, hiking, travelling on a budget, museums, photography, poetry, writing a novel, "
    "recycling, composting, minimalism, moving to a new city, raising a puppy, caring for houseplants, "
    "volunteering, elections, the stock market, inflation, the history of money, earthquakes, "
    "vaccines, the human heart, nutrition, exercise for beginners, robots, 3D printing, bicycles, trains"
).split(", ")

CHAT_TEMPLATES = (
    "Explain {t} to a ten-year-old.",
    "Write a short poem about {t}.",
    "Give me five interesting facts about {t}.",
    "What are the main advantages and disadvantages of {t}?",
    "Write a short story in which {t} plays an important role.",
    "I am preparing a presentation about {t}. Suggest an outline with five sections.",
    "What are common misconceptions about {t}?",
    "Write a friendly email inviting my colleagues to a lunch talk on {t}.",
    "Describe {t} in three sentences.",
    "Why should a student care about {t}? Answer in one paragraph.",
    "Create a list of discussion questions about {t} for a book club.",
    "Write a tweet that makes people curious about {t}.",
    "How has {t} changed over the last hundred years?",
    "Give me a step-by-step plan to learn more about {t} in one month.",
    "Write a dialogue between a teacher and a student about {t}.",
    "Compare {t} and {u}: how are they similar and how do they differ?",
    "Write a product description for a board game themed around {t}.",
    "What would the world look like without {t}?",
    "Give three tips for someone who wants to get started with {t}.",
    "Write a limerick about {t}.",
)

# ----------------------------------------------------------------------------- code
CODE_TASKS = (
    ("is_palindrome", "s: str", "bool", "Return True if s reads the same forwards and backwards, ignoring case."),
    ("fibonacci", "n: int", "int", "Return the n-th Fibonacci number, with fibonacci(0) == 0."),
    ("count_vowels", "text: str", "int", "Return how many vowels the text contains."),
    ("flatten", "nested: list", "list", "Flatten a list of lists by one level."),
    ("word_frequencies", "text: str", "dict", "Map every word of the text to the number of times it occurs."),
    ("second_largest", "numbers: list", "int", "Return the second largest distinct number in the list."),
    ("is_prime", "n: int", "bool", "Return True if n is a prime number."),
    ("reverse_words", "sentence: str", "str", "Reverse the order of the words in a sentence."),
    ("merge_sorted", "a: list, b: list", "list", "Merge two sorted lists into one sorted list."),
    ("running_mean", "values: list", "list", "Return the running mean after each element."),
    ("celsius_to_fahrenheit", "c: float", "float", "Convert a temperature from Celsius to Fahrenheit."),
    ("unique_in_order", "items: list", "list", "Remove duplicates while keeping the first occurrence order."),
    ("gcd", "a: int, b: int", "int", "Return the greatest common divisor of a and b."),
    ("chunk", "items: list, size: int", "list", "Split the list into consecutive chunks of the given size."),
    ("capitalize_words", "text: str", "str", "Capitalise the first letter of every word."),
    ("binary_search", "items: list, target: int", "int", "Return the index of target in the sorted list, or -1."),
    ("digit_sum", "n: int", "int", "Return the sum of the decimal digits of a non-negative integer."),
    ("transpose", "matrix: list", "list", "Return the transpose of a matrix given as a list of rows."),
    ("anagrams", "a: str, b: str", "bool", "Return True if the two words are anagrams of each other."),
    ("max_subarray", "numbers: list", "int", "Return the largest sum of a contiguous sub-list."),
    ("roman_numeral", "n: int", "str", "Convert a positive integer to a Roman numeral."),
    ("count_words_longer", "text: str, k: int", "int", "Count the words that have more than k letters."),
    ("rotate_list", "items: list, k: int", "list", "Rotate the list to the right by k positions."),
    ("factorial", "n: int", "int", "Return n factorial, computed iteratively."),
    ("parse_key_values", "line: str", "dict", "Parse 'a=1;b=2' into a dictionary of strings."),
    ("pairwise_differences", "numbers: list", "list", "Return the differences between consecutive numbers."),
    ("is_sorted", "items: list", "bool", "Return True if the list is sorted in non-decreasing order."),
    ("longest_word", "text: str", "str", "Return the longest word of the text (the first one on ties)."),
    ("matrix_sum", "matrix: list", "int", "Return the sum of all entries of a matrix."),
    ("caesar_shift", "text: str, k: int", "str", "Shift every letter of the text by k places in the alphabet."),
    ("leap_year", "year: int", "bool", "Return True if the year is a leap year in the Gregorian calendar."),
    ("median", "numbers: list", "float", "Return the median of a non-empty list of numbers."),
    ("group_by_length", "words: list", "dict", "Group words into a dictionary keyed by their length."),
    ("remove_punctuation", "text: str", "str", "Remove every punctuation character from the text."),
    ("power_set", "items: list", "list", "Return all subsets of the list."),
    ("dot_product", "a: list, b: list", "float", "Return the dot product of two vectors of equal length."),
)

CODE_TEMPLATES = (
    "Write a Python function `{name}({args}) -> {ret}`. {doc} Include a docstring.",
    "Implement this in Python and explain your solution briefly: {doc}",
    "Finish the following Python function.\n\n```python\ndef {name}({args}) -> {ret}:\n    \"\"\"{doc}\"\"\"\n```",
    "Write unit tests with pytest for a function `{name}` that does the following: {doc}",
    "Show two different ways to write `{name}` in Python. {doc}",
    "Write a JavaScript function called {name} that does this: {doc}",
)

# ----------------------------------------------------------------------------- math
NAMES = ("Amara", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jules", "Kiri", "Lena",
         "Mateo", "Noor", "Oskar", "Priya", "Quinn", "Rosa", "Sami", "Tomas", "Uma", "Vera", "Wen", "Yusuf", "Zoe")
ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "stamps", "books", "seashells", "cupcakes", "cards")

MATH_TEMPLATES = (
    "{n1} has {a} {it}. {n1} buys {b} packs with {c} {it} in each pack and gives {d} {it} to {n2}. "
    "How many {it} does {n1} have now?",
    "A bakery sells muffins for ${p} each. On Monday it sells {a} muffins and on Tuesday {b} more than on "
    "Monday. How much money does the bakery make on the two days together?",
    "{n1} reads {a} pages every weekday and {b} pages on each day of the weekend. How many pages does "
    "{n1} read in {c} weeks?",
    "A train travels at {a} km per hour for {b} hours and then at {c} km per hour for {d} hours. What is "
    "the total distance it travels?",
    "{n1} earns ${a} per hour and works {b} hours a week. After {c} weeks, {n1} spends ${d} on a bicycle. "
    "How much money is left?",
    "A garden has {a} rows of tomato plants with {b} plants in each row. Each plant gives {c} tomatoes. "
    "If {d} tomatoes are rotten, how many good tomatoes are there?",
    "{n1} is {a} years old. {n2} is {b} years older than {n1}. In {c} years, what will be the sum of their ages?",
    "A shop offers a {pc}% discount on a jacket that costs ${a}0. How much does the jacket cost after the "
    "discount?",
    "A tank holds {a}0 litres of water. It leaks {b} litres per hour. After {c} hours, {d} litres are added. "
    "How much water is in the tank?",
    "{n1} and {n2} share {a}{b} {it} in the ratio {c}:{d}. How many {it} does {n2} get? Round down if needed.",
    "A school has {a} classes with {b} students each. {pc}% of the students take the bus. How many students "
    "take the bus? Round to the nearest whole number.",
    "{n1} runs {a} km on Monday, twice as far on Wednesday and {b} km less than Wednesday on Friday. "
    "How many km does {n1} run in total?",
    "Solve step by step: {a} * {b} + {c} * {d} - {a}",
    "A rectangle is {a} cm long and {b} cm wide. What are its area and its perimeter?",
    "{n1} saves ${a} every week. How many weeks does {n1} need to save ${b}{c}0?",
)

# ----------------------------------------------------------------------------- qa
COUNTRIES = ("France", "Japan", "Brazil", "Kenya", "Canada", "Norway", "India", "Mexico", "Egypt", "Australia",
             "Argentina", "Vietnam", "Poland", "Morocco", "Peru", "Ireland", "Thailand", "Ghana", "Chile", "Greece")
ELEMENTS = ("hydrogen", "helium", "carbon", "nitrogen", "oxygen", "sodium", "iron", "copper", "silver", "gold",
            "neon", "calcium", "zinc", "uranium", "silicon", "magnesium")
QA_TEMPLATES = (
    "What is the capital of {country}?",
    "What language is mainly spoken in {country}?",
    "What currency is used in {country}?",
    "Which continent is {country} in?",
    "What is the chemical symbol of {element}?",
    "Is {element} a metal?",
    "Who is known for discovering {element}?",
    "When did people first use {t}?",
    "Who invented {t}?",
    "What is the difference between weather and climate?",
    "How many bones are in the adult human body?",
    "Why is the sky blue?",
    "How far is the Moon from the Earth?",
    "Where do {animal} live?",
    "What do {animal} eat?",
    "How long do {animal} usually live?",
)
ANIMALS = ("penguins", "koalas", "wolves", "octopuses", "owls", "camels", "sea turtles", "foxes", "bats", "ants")

PASSAGE_QUESTIONS = (
    "Read the text below and answer: what is it mainly about?\n\n{p}",
    "{p}\n\nBased on the text above, what is one thing a reader should remember?",
    "Answer in one sentence using the passage: what problem does it describe?\n\n{p}",
)
SUMMARY_TEMPLATES = (
    "Summarise the following text in two sentences:\n\n{p}",
    "Write a short summary of this text for a newsletter:\n\n{p}",
    "TL;DR:\n\n{p}",
    "Give the key points of the following text as a bulleted list:\n\n{p}",
    "Condense this into one sentence:\n\n{p}",
)

FOLLOWUPS = (
    "Make it shorter.",
    "Can you explain that in simpler words?",
    "Please give an example.",
    "Rewrite your answer as a bulleted list.",
    "What is the most important point?",
    "Can you explain the second step in more detail?",
    "Now make it more formal.",
    "Add one more idea to your answer.",
    "Are there any exceptions?",
    "Summarise your answer in one sentence.",
)
