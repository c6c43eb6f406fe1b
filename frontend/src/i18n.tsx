// English and Simplified Chinese (the strings in locales/), switchable and remembered (localStorage).
import { createContext, useContext, useMemo, useState, type ReactNode } from "react";
import dayjs from "dayjs";
import "dayjs/locale/zh-cn";
import { en } from "./locales/en";
import { zh } from "./locales/zh";

export type Lang = "en" | "zh";

export type Key = keyof typeof en;

export const dictionaries: Record<Lang, Record<Key, string>> = { en, zh };

const STORAGE_KEY = "torus.lang";

export function initialLang(): Lang {
  const saved = localStorage.getItem(STORAGE_KEY);
  if (saved === "en" || saved === "zh") return saved;
  return navigator.language?.toLowerCase().startsWith("zh") ? "zh" : "en";
}

type Ctx = { lang: Lang; setLang: (l: Lang) => void; t: (k: Key) => string };
const I18n = createContext<Ctx>({ lang: "en", setLang: () => {}, t: (k) => en[k] });

export function I18nProvider({ children, lang: fixed }: { children: ReactNode; lang?: Lang }) {
  const [lang, setLangState] = useState<Lang>(fixed ?? initialLang());
  const value = useMemo<Ctx>(() => {
    dayjs.locale(lang === "zh" ? "zh-cn" : "en");
    document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
    return {
      lang,
      setLang: (l) => {
        localStorage.setItem(STORAGE_KEY, l);
        setLangState(l);
      },
      t: (k) => dictionaries[lang][k] ?? en[k],
    };
  }, [lang]);
  return <I18n.Provider value={value}>{children}</I18n.Provider>;
}

export const useI18n = () => useContext(I18n);
